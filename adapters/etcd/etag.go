package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/precondition"
)

// The ETag bookkeeping of `precondition: etag` / `generation`
// (precondition.Store) keeps one key per object, P/e/R, beside the fence
// record P/f/R rather than in it: the fence's Txns rewrite the whole record
// on every advance and drain, and an ETag kept there would be lost by each
// of them (and every record Txn would race the bookkeeping's). The ETag key
// is written only here, each write a compare on its mod revision, so a
// record is never overwritten by an older token's. An acknowledged etcd
// write is on a quorum's disk: no record needs to be made durable later
// (precondition.DurableRecorder).

var (
	_ precondition.Store     = (*Store)(nil)
	_ precondition.Forgetter = (*Store)(nil)
)

// etagRecord is the value of an ETag key.
type etagRecord struct {
	ETag  string `json:"e"`
	Token int64  `json:"t"`
}

func (f *Store) etagDir() string                { return f.prefix + "/e/" }
func (f *Store) etagKey(resource string) string { return f.etagDir() + resource }

func decodeETag(kv *mvccpb.KeyValue) (etagRecord, error) {
	var r etagRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return r, fmt.Errorf("etag record %q: %w", kv.Key, err)
	}
	return r, nil
}

func (r etagRecord) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// LastETag returns the ETag the gateway last recorded for resource ("" if
// none), with a linearizable read: a record acknowledged by any replica is
// seen.
func (f *Store) LastETag(ctx context.Context, resource string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	resp, err := f.client.Get(ctx, f.etagKey(resource))
	if err != nil {
		return "", fmt.Errorf("load etag of %s: %w", resource, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	r, err := decodeETag(resp.Kvs[0])
	if err != nil {
		return "", err
	}
	f.etagRevs.set(resource, etagRev{resp.Kvs[0].ModRevision, r.Token})
	return r.ETag, nil
}

// etagRevs remembers the mod revision and token of the ETag keys this
// process last read or wrote, the guess of RecordETag's first Txn: a write
// reads its record, marks it unknown and records its answer, one request
// each when no other replica wrote the object meanwhile. A wrong guess
// costs one request more (the Txn fails and reads the key). Bounded:
// cleared when full.
type etagRevs struct {
	mu sync.Mutex
	m  map[string]etagRev
}

// etagRev is a key's mod revision and the token of its record at it.
type etagRev struct{ rev, token int64 }

const etagRevsMax = 10000

func (c *etagRevs) get(resource string) etagRev {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[resource]
}

func (c *etagRevs) set(resource string, r etagRev) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= etagRevsMax {
		c.m = make(map[string]etagRev)
	}
	c.m[resource] = r
}

// errNoFence: an ETag is recorded only for an object a write was admitted
// to, which has a fence record (as on PostgreSQL, where it is a column of
// that record).
var errNoFence = errors.New("no fence record")

// RecordETag stores etag for resource unless a write with a newer token
// recorded one already. The first Txn guesses the key's mod revision
// (etagRevs; 0, no record, if unknown) and reads the record when the guess
// was wrong.
func (f *Store) RecordETag(ctx context.Context, resource string, token int64, etag string) error {
	if strings.Contains(resource, "\x00") {
		return fmt.Errorf("record etag of %q: %w", resource, errNUL)
	}
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	key, fence := f.etagKey(resource), f.fenceKey(resource)
	val := etagRecord{ETag: etag, Token: token}.encode()
	// A guess is taken only if its record is not a newer token's: the
	// Txn compares the revision alone. -1 matches no key: read it.
	modRev := int64(-1)
	if g := f.etagRevs.get(resource); g.token <= token {
		modRev = g.rev
	}
	for {
		f.requests.Add(1)
		resp, err := f.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev),
				clientv3.Compare(clientv3.CreateRevision(fence), ">", 0)).
			Then(clientv3.OpPut(key, val)).
			Else(clientv3.OpGet(key), clientv3.OpGet(fence, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return fmt.Errorf("record etag of %s: %w", resource, err)
		}
		if resp.Succeeded {
			f.etagRevs.set(resource, etagRev{resp.Header.Revision, token})
			return nil
		}
		if resp.Responses[1].GetResponseRange().Count == 0 {
			return fmt.Errorf("record etag of %s: %w", resource, errNoFence)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			modRev = 0
			continue
		}
		cur, err := decodeETag(kvs[0])
		if err != nil {
			return err
		}
		f.etagRevs.set(resource, etagRev{kvs[0].ModRevision, cur.Token})
		if cur.Token > token {
			return nil // a newer write's record stays
		}
		modRev = kvs[0].ModRevision
	}
}

// forgetBatch bounds the puts of one Txn of ForgetETagsBelow (etcd's
// --max-txn-ops defaults to 128; each put has its compare).
const forgetBatch = 100

// ForgetETagsBelow implements precondition.Forgetter: every ETag record
// whose resource starts with prefix becomes unknown, its token at least
// token. Records are read a page at a time and rewritten with a compare on
// each one's mod revision; a page whose Txn lost a race is read again.
func (f *Store) ForgetETagsBelow(ctx context.Context, prefix string, token int64) error {
	dir := f.etagDir()
	from, end := dir+prefix, clientv3.GetPrefixRangeEnd(dir+prefix)
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	for {
		f.requests.Add(1)
		resp, err := f.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(forgetBatch))
		if err != nil {
			return fmt.Errorf("forget etags below %s: %w", prefix, err)
		}
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for _, kv := range resp.Kvs {
			r, err := decodeETag(kv)
			if err != nil {
				return err
			}
			if r.ETag == fencegate.ETagUnknown && r.Token >= token {
				continue
			}
			k := string(kv.Key)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision))
			puts = append(puts, clientv3.OpPut(k, etagRecord{ETag: fencegate.ETagUnknown, Token: max(r.Token, token)}.encode()))
		}
		if len(puts) > 0 {
			f.requests.Add(1)
			tr, err := f.client.Txn(ctx).If(cmps...).Then(puts...).Commit()
			if err != nil {
				return fmt.Errorf("forget etags below %s: %w", prefix, err)
			}
			if !tr.Succeeded {
				continue // a record changed under us: read the page again
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// etagsOf returns the ETags recorded for the fence records kvs (one page of
// ExportFences, in key order) as of revision rev, by fence key: one range
// read over the page's resources.
func (f *Store) etagsOf(ctx context.Context, kvs []*mvccpb.KeyValue, rev int64) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	fdir, edir := f.prefix+"/f/", f.etagDir()
	first := strings.TrimPrefix(string(kvs[0].Key), fdir)
	last := strings.TrimPrefix(string(kvs[len(kvs)-1].Key), fdir)
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	resp, err := f.client.Get(ctx, edir+first, clientv3.WithRange(edir+last+"\x00"), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("etags: %w", err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeETag(kv)
		if err != nil {
			return nil, err
		}
		out[fdir+strings.TrimPrefix(string(kv.Key), edir)] = r.ETag
	}
	return out, nil
}

// importETag is the put of an imported record's ETag, in the Txn that
// raises its fence (as PostgreSQL's import sets the etag column): its token
// is the imported highest, above any record kept for the lower fence.
func (f *Store) importETag(in fencegate.FenceRecord) clientv3.Op {
	return clientv3.OpPut(f.etagKey(in.Resource), etagRecord{ETag: in.ETag, Token: in.Highest}.encode())
}

// withETag sets r's ETag to the one recorded in kvs (the ETag key read
// beside the record, if it exists): the record's own field is rewritten
// by every advance.
func (r *record) withETag(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 {
		return nil
	}
	e, err := decodeETag(kvs[0])
	r.ETag = e.ETag
	return err
}
