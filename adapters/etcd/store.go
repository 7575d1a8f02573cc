package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
)

// Store is an etcd cluster as the fence store of shared mode: the fence
// records under Prefix + "/f/" (one key per resource, a JSON record), read
// and raised with compare-and-set Txns. SharedFence adds the markers.
type Store struct {
	client       *clientv3.Client
	prefix       string
	storeTimeout time.Duration
	requests     atomic.Int64
	etagRevs     etagRevs // etag.go
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Client reaches the cluster: endpoints, credentials, TLS
	// (ClientConfig, shared with the token source).
	Client ClientOptions
	// Prefix of every key. Default /fencegate.
	Prefix string
	// Timeout bounds one request that waits for no other writer. Default 5s.
	Timeout time.Duration
}

// OpenStore returns the store of opts' cluster. It does not wait for the
// cluster: while etcd cannot be reached, fence decisions fail closed and
// Ping reports it.
func OpenStore(opts StoreOptions) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = "/fencegate"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = fencegate.DefaultStoreTimeout
	}
	if opts.Client.DialTimeout <= 0 {
		opts.Client.DialTimeout = 5 * time.Second
	}
	cc, err := ClientConfig(opts.Client)
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &Store{client: c, prefix: strings.TrimSuffix(opts.Prefix, "/"), storeTimeout: opts.Timeout}, nil
}

// Requests returns the number of requests sent to etcd (Txns, reads,
// watches opened, lease grants and renewals), for benchmarks.
func (f *Store) Requests() int64 { return f.requests.Load() }

// Close closes the connections to the cluster.
func (f *Store) Close() error { return f.client.Close() }

// Keys.
func (f *Store) fenceKey(resource string) string { return f.prefix + "/f/" + resource }
func (f *Store) markerDir(resource string) string {
	return f.prefix + "/m/" + resource + "\x00"
}
func (f *Store) markerKey(resource string, token int64, lease clientv3.LeaseID) string {
	return f.markerDir(resource) + pad(token) + "\x00" + lease16(lease)
}
func (f *Store) replicaKey(l clientv3.LeaseID) string { return f.prefix + "/r/" + lease16(l) }
func (f *Store) aliveKey(l clientv3.LeaseID) string   { return f.prefix + "/a/" + lease16(l) }
func (f *Store) deadKey(id string) string             { return f.prefix + "/d/" + id }

// pad writes a token so that byte order is numeric order.
func pad(token int64) string { return fmt.Sprintf("%020d", token) }

func lease16(l clientv3.LeaseID) string { return fmt.Sprintf("%016x", int64(l)) }

// record is the value of a fence key.
type record struct {
	Highest int64  `json:"h"`
	Ready   bool   `json:"r"`
	Owner   string `json:"o,omitempty"`
	ETag    string `json:"e,omitempty"`
	Updated int64  `json:"u,omitempty"` // unix milliseconds
}

func decode(kv *mvccpb.KeyValue) (record, error) {
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return r, fmt.Errorf("fence record %q: %w", kv.Key, err)
	}
	return r, nil
}

func (r record) state(resource string) fencegate.FenceState {
	st := fencegate.FenceState{Resource: resource, Highest: r.Highest, Ready: r.Ready, Owner: r.Owner, ETag: r.ETag}
	if r.Updated != 0 {
		st.UpdatedAt = time.UnixMilli(r.Updated).UTC()
	}
	return st
}

func (r record) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// raise compares-and-raises resource's record to token: created ready when
// there was none (no write can be in flight under a fence that did not
// exist: every permit is given on a read of the record), raised not ready
// otherwise. It reports the record as it is afterwards, and whether this
// call raised it with the Txn's answer, whose Responses[1:] answer extra,
// run in the same Txn after the raise.
func (f *Store) raise(ctx context.Context, resource string, token int64, owner string, exists bool, modRev int64, extra ...clientv3.Op) (record, *clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	key := f.fenceKey(resource)
	for {
		rec := record{Highest: token, Ready: !exists, Owner: owner, Updated: time.Now().UnixMilli()}
		f.requests.Add(1)
		resp, err := f.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(append([]clientv3.Op{clientv3.OpPut(key, rec.encode())}, extra...)...).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return record{}, nil, fencegate.Unavailable(resource, fmt.Errorf("advance fence to %d: %w", token, err))
		}
		if resp.Succeeded {
			return rec, resp, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			exists, modRev = false, 0
			continue
		}
		cur, err := decode(kvs[0])
		if err != nil {
			return record{}, nil, fencegate.Unavailable(resource, err)
		}
		if cur.Highest >= token {
			return cur, nil, nil
		}
		exists, modRev = true, kvs[0].ModRevision
	}
}

// State reads resource's fence record (zero Highest if none), with the
// ETag recorded for it (etag.go) in the same request.
func (f *Store) State(ctx context.Context, resource string) (fencegate.FenceState, error) {
	st, _, err := f.stateAt(ctx, resource)
	return st, err
}

// stateAt is State with the revision it was read at (0 without a record).
func (f *Store) stateAt(ctx context.Context, resource string) (fencegate.FenceState, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	tr, err := f.client.Txn(ctx).Then(clientv3.OpGet(f.fenceKey(resource)), clientv3.OpGet(f.etagKey(resource))).Commit()
	if err != nil {
		return fencegate.FenceState{Resource: resource}, 0, fencegate.Unavailable(resource, err)
	}
	kvs := tr.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// No fence yet: nothing can be in flight under it.
		return fencegate.FenceState{Resource: resource, Ready: true}, 0, nil
	}
	rec, err := decode(kvs[0])
	if err == nil {
		err = rec.withETag(tr.Responses[1].GetResponseRange().Kvs)
	}
	if err != nil {
		return fencegate.FenceState{Resource: resource}, 0, fencegate.Unavailable(resource, err)
	}
	return rec.state(resource), tr.Header.Revision, nil
}

// AdvanceFence raises resource's fence to token (never lowers it), not
// ready: the first write of the new token drains the older ones.
func (f *Store) AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	if strings.Contains(resource, "\x00") {
		return fencegate.FenceState{}, fencegate.Unavailable(resource, errNUL)
	}
	if _, _, err := f.raiseFrom(ctx, resource, token, owner); err != nil {
		return fencegate.FenceState{Resource: resource}, err
	}
	return f.State(ctx, resource)
}

// raiseFrom is raise from the record as it is now.
func (f *Store) raiseFrom(ctx context.Context, resource string, token int64, owner string) (record, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	f.requests.Add(1)
	resp, err := f.client.Get(rctx, f.fenceKey(resource))
	cancel()
	if err != nil {
		return record{}, false, fencegate.Unavailable(resource, err)
	}
	var modRev int64
	exists := len(resp.Kvs) > 0
	if exists {
		cur, err := decode(resp.Kvs[0])
		if err != nil {
			return record{}, false, fencegate.Unavailable(resource, err)
		}
		if cur.Highest >= token {
			return cur, false, nil
		}
		modRev = resp.Kvs[0].ModRevision
	}
	rec, raised, err := f.raise(ctx, resource, token, owner, exists, modRev)
	return rec, raised != nil, err
}

// LoadFence implements gateway.Store.
func (f *Store) LoadFence(ctx context.Context, resource string) (fencegate.FenceState, error) {
	return f.State(ctx, resource)
}

// Ping reports whether a linearizable read succeeds (a quorum answers).
func (f *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	_, err := f.client.Get(ctx, f.prefix+"/f/", clientv3.WithCountOnly(), clientv3.WithLimit(1))
	return err
}

// ListFences pages through the fence records (console.FenceLister): up to
// limit records whose resource starts with prefix and sorts after after,
// in key order. Two range reads (the records, their ETags), whatever the
// number of records.
func (f *Store) ListFences(ctx context.Context, prefix, after string, limit int) ([]fencegate.FenceState, error) {
	dir := f.prefix + "/f/"
	from := dir + prefix
	if after != "" && dir+after >= from {
		from = dir + after + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(dir + prefix)
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	resp, err := f.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(max(limit, 1))))
	if err != nil {
		return nil, fmt.Errorf("list fences: %w", err)
	}
	etags, err := f.etagsOf(ctx, resp.Kvs, resp.Header.Revision) // etag.go
	if err != nil {
		return nil, fmt.Errorf("list fences: %w", err)
	}
	out := make([]fencegate.FenceState, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rec, err := decode(kv)
		if err != nil {
			return nil, err
		}
		if e, ok := etags[string(kv.Key)]; ok {
			rec.ETag = e
		}
		out = append(out, rec.state(strings.TrimPrefix(string(kv.Key), dir)))
	}
	return out, nil
}

// exportPage is the number of records one read of ExportFences fetches.
const exportPage = 1000

// ExportFences calls fn with every fence record in key order, as of one
// revision (the first page's: every page reads at it), for `fence export`.
func (f *Store) ExportFences(ctx context.Context, fn func(fencegate.FenceRecord) error) error {
	dir := f.prefix + "/f/"
	end := clientv3.GetPrefixRangeEnd(dir)
	from := dir
	var rev int64
	for {
		rctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
		f.requests.Add(1)
		resp, err := f.client.Get(rctx, from, clientv3.WithRange(end), clientv3.WithLimit(exportPage), clientv3.WithRev(rev))
		cancel()
		if err != nil {
			return fmt.Errorf("export fences: %w", err)
		}
		rev = resp.Header.Revision
		etags, err := f.etagsOf(ctx, resp.Kvs, rev) // etag.go
		if err != nil {
			return fmt.Errorf("export fences: %w", err)
		}
		for _, kv := range resp.Kvs {
			rec, err := decode(kv)
			if err != nil {
				return fmt.Errorf("export fences: %w", err)
			}
			if e, ok := etags[string(kv.Key)]; ok {
				rec.ETag = e
			}
			if err := fn(fencegate.FenceRecord{Resource: strings.TrimPrefix(string(kv.Key), dir), Highest: rec.Highest, Owner: rec.Owner, ETag: rec.ETag}); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ImportFences max-merges recs: each record raises its resource's fence
// (compare-and-raise, not ready: the first write of the new token drains
// the older ones) if it is higher than the stored one, and is ignored
// otherwise (I7: an import never lowers a fence). Each record is raised on
// its own: an import that fails midway leaves the records before raised,
// and running it again is harmless. It returns how many were raised.
//
// Like an operator's advance, it returns once the raises are known
// everywhere: no marker of an older token is left on a raised resource
// (drainOlder), or the default drain timeout has passed for the whole
// call. A replica whose watch has not brought a raise yet still joins
// writes of a token it holds a marker of (SharedFence.Advance says why).
func (f *Store) ImportFences(ctx context.Context, recs []fencegate.FenceRecord) (int, error) {
	for _, r := range recs {
		if r.Resource == "" || r.Highest <= 0 || strings.Contains(r.Resource, "\x00") {
			return 0, fmt.Errorf("import fence %q: resource (without NUL) and a positive highest are required", r.Resource)
		}
	}
	deadline := time.Now().Add(fencegate.DefaultDrainTimeout)
	raised := 0
	for _, r := range recs {
		up, err := f.importOne(ctx, r)
		if err != nil {
			return raised, fmt.Errorf("import fences: %w", err)
		}
		if !up {
			continue
		}
		raised++
		if _, err := f.drainOlder(ctx, r.Resource, r.Highest, deadline); err != nil {
			return raised, fmt.Errorf("import fences: %q raised: %w", r.Resource, err)
		}
	}
	return raised, nil
}

// importOne max-merges one record with a compare on the mod revision read.
func (f *Store) importOne(ctx context.Context, in fencegate.FenceRecord) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	key := f.fenceKey(in.Resource)
	for {
		f.requests.Add(1)
		resp, err := f.client.Get(ctx, key)
		if err != nil {
			return false, err
		}
		var modRev int64
		if len(resp.Kvs) > 0 {
			cur, err := decode(resp.Kvs[0])
			if err != nil {
				return false, err
			}
			if cur.Highest >= in.Highest {
				return false, nil
			}
			modRev = resp.Kvs[0].ModRevision
		}
		rec := record{Highest: in.Highest, Ready: modRev == 0, Owner: in.Owner, ETag: in.ETag, Updated: time.Now().UnixMilli()}
		f.requests.Add(1)
		tr, err := f.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, rec.encode()), f.importETag(in)).Commit()
		if err != nil {
			return false, err
		}
		if tr.Succeeded {
			return true, nil
		}
	}
}
