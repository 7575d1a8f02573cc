package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
	"github.com/fencegate/fencegate/sharedfence"
)

// Hierarchical keys on etcd (gateway.Scope): the rules are the shared
// ones (sharedfence.Decide; docs/design.md §4, "Hierarchical keys in
// shared mode"), on etcd's primitives:
//
//   - Below level: the key P/b/C holds B(C) (at least the token of every
//     member write admitted through C, never lowered), whether the wait
//     for C's own writes is done for it (ready), and whether it also
//     covers the member records written before the hierarchy (known).
//   - A write's marker Txn also reads the fence and below records of its
//     own key and of every collection above it, at the revision its marker
//     exists from (or existed since): the etcd form of PostgreSQL's read
//     after the try-lock. A collection's advance at an earlier revision is
//     seen; one at a later revision finds the marker (below).
//   - Tree drain of C at T: the advance is a Txn that compares C's record,
//     its level and every member record (a compare over the range P/f/C/:
//     none changed since they were read and found not newer than T), so a
//     refused collection write leaves the fence as it was. Then, at one
//     revision X, it reads the member records (the scan: B(C) raised to
//     their highest, known) and the markers below C; it waits until every
//     marker created at or before X is deleted (a marker put after X reads
//     C's raised record), and for C's own older markers, the lost replicas'
//     forward timeouts, and sets C ready.
//   - Below drain of A at t (a member above B(A)): B(A) raised to t, not
//     ready (compare on its mod revision), then the wait for every marker
//     of A's own key created before, the lost replicas', and B(A) ready.

var _ gateway.TreeFence = (*SharedFence)(nil)

// level is the value of a below key.
type level struct {
	Below int64 `json:"b"`
	Ready bool  `json:"r"`
	Known bool  `json:"k"`
}

func (f *Store) belowKey(resource string) string { return f.prefix + "/b/" + resource }

// decodeLevel reads a below key's value, and its mod revision; none (nil):
// 0, ready, not known.
func decodeLevel(kv *mvccpb.KeyValue) (level, int64, error) {
	if kv == nil {
		return level{Ready: true}, 0, nil
	}
	var l level
	if err := json.Unmarshal(kv.Value, &l); err != nil {
		return l, 0, fmt.Errorf("below level %q: %w", kv.Key, err)
	}
	return l, kv.ModRevision, nil
}

// first is the first of kvs, nil if none.
func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

func (l level) encode() string {
	b, _ := json.Marshal(l)
	return string(b)
}

// scopeRows builds the rows of scope from a marker Txn's answer.
func (f *SharedFence) scopeRows(scope []string, resp *clientv3.TxnResponse, reads, belows map[string]int) (map[string]sharedfence.Row, error) {
	rows := make(map[string]sharedfence.Row, len(scope))
	for _, k := range scope {
		r := sharedfence.Row{Ready: true}
		if kvs := resp.Responses[reads[k]].GetResponseRange().Kvs; len(kvs) > 0 {
			rec, err := decode(kvs[0])
			if err != nil {
				return nil, err
			}
			r.Exists, r.Highest, r.Ready = true, rec.Highest, rec.Ready
		}
		l, _, err := decodeLevel(first(resp.Responses[belows[k]].GetResponseRange().Kvs))
		if err != nil {
			return nil, err
		}
		r.Below, r.BelowReady, r.Known = l.Below, l.Ready, l.Known
		rows[k] = r
	}
	return rows, nil
}

// AdmitTree implements gateway.TreeFence: w on its own key (ScopeKey or
// ScopeTree) and ScopeMember on each collection in above (keys above
// w.Resource), by the shared rules (sharedfence.AdmitTree). The permit
// holds w's own marker only.
func (f *SharedFence) AdmitTree(ctx context.Context, w gateway.Write, above []string) (gateway.Permit, error) {
	if err := f.admissible(w); err != nil {
		return nil, err
	}
	deadline, drain := sharedfence.DrainDeadline(w, f.drainTimeout)
	p, err := sharedfence.AdmitTree(ctx, tree{f}, w, above, deadline, drain)
	if ref := fencegate.AsError(err); ref != nil && ref.Code == fencegate.CodeStaleToken &&
		w.Scope == gateway.ScopeTree && ref.Resource == w.Resource {
		// Close this replica's marker of the key to writers of the token
		// (refused for a key below it): they are refused on their reads
		// anyway, and a member's wait on the key must not starve on
		// writers that keep joining the marker.
		f.superseded(w.Resource, ref.Highest)
	}
	return p, err
}

// tree is the etcd side of sharedfence.AdmitTree.
type tree struct{ f *SharedFence }

func (t tree) AdmitKey(ctx context.Context, w gateway.Write, scope []string, deadline time.Time, drain time.Duration) (gateway.Permit, map[string]sharedfence.Row, error) {
	return t.f.admitKey(ctx, w, scope, deadline, drain)
}

func (t tree) TreeDrain(ctx context.Context, w gateway.Write, coll string, token int64, deadline time.Time, drain time.Duration) error {
	return t.f.treeDrain(ctx, w, coll, token, false, deadline, drain)
}

func (t tree) BelowDrain(ctx context.Context, w gateway.Write, acts []sharedfence.Action, deadline time.Time, drain time.Duration) error {
	return t.f.belowDrain(ctx, w, acts, deadline, drain)
}

// txn runs one Txn bounded by the store timeout.
func (f *SharedFence) txn(ctx context.Context, cmps []clientv3.Cmp, then ...clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	return f.client.Txn(ctx).If(cmps...).Then(then...).Commit()
}

// treeAdvance raises coll's record to token, unless a member record or
// coll's below level is newer (stale: nothing raised). It reports whether
// it raised; false: the record stood at token or above already.
func (f *SharedFence) treeAdvance(ctx context.Context, w gateway.Write, coll string, token int64) (bool, error) {
	fkey, bkey := f.fenceKey(coll), f.belowKey(coll)
	members := f.fenceKey(resource.MemberPrefix(coll))
	for {
		resp, err := f.txn(ctx, nil, clientv3.OpGet(fkey), clientv3.OpGet(bkey), clientv3.OpGet(members, clientv3.WithPrefix()))
		if err != nil {
			return false, fencegate.Unavailable(coll, fmt.Errorf("advance fence to %d: %w", token, err))
		}
		var frev int64
		exists := false
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			rec, err := decode(kvs[0])
			if err != nil {
				return false, fencegate.Unavailable(coll, err)
			}
			if rec.Highest >= token {
				return false, nil
			}
			exists, frev = true, kvs[0].ModRevision
		}
		lvl, brev, err := decodeLevel(first(resp.Responses[1].GetResponseRange().Kvs))
		if err != nil {
			return false, fencegate.Unavailable(coll, err)
		}
		mh, err := highestOf(resp.Responses[2].GetResponseRange().Kvs)
		if err != nil {
			return false, fencegate.Unavailable(coll, err)
		}
		if newer := max(lvl.Below, mh); newer > token {
			ref := fencegate.StaleError(coll, token, newer)
			ref.Message += " (for a key below it)"
			return false, ref
		}
		// A new record starts ready (no write of coll's own can be in
		// flight under it); its members are waited for all the same.
		rec := record{Highest: token, Ready: !exists, Owner: w.Owner, Updated: time.Now().UnixMilli()}
		put, err := f.txn(ctx, []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(fkey), "=", frev),
			clientv3.Compare(clientv3.ModRevision(bkey), "=", brev),
			clientv3.Compare(clientv3.ModRevision(members), "<", resp.Header.Revision+1).WithPrefix(),
		}, clientv3.OpPut(fkey, rec.encode()))
		if err != nil {
			return false, fencegate.Unavailable(coll, fmt.Errorf("advance fence to %d: %w", token, err))
		}
		if put.Succeeded {
			f.superseded(coll, token)
			return true, nil
		}
	}
}

// highestOf is the highest token of fence records kvs.
func highestOf(kvs []*mvccpb.KeyValue) (int64, error) {
	var h int64
	for _, kv := range kvs {
		rec, err := decode(kv)
		if err != nil {
			return 0, err
		}
		h = max(h, rec.Highest)
	}
	return h, nil
}

// treeDrain is the advance (if advance) and drain of a collection write:
// with the advance made, it scans the member records into coll's below
// level (known), waits for every marker below coll and, coll not ready,
// for coll's own older markers, then for the lost replicas, and sets coll
// ready. It returns nil also when coll's record moved on: the caller
// decides again.
func (f *SharedFence) treeDrain(ctx context.Context, w gateway.Write, coll string, token int64, advance bool, deadline time.Time, drain time.Duration) error {
	if advance {
		raised, err := f.treeAdvance(ctx, w, coll, token)
		if err != nil || !raised {
			return err
		}
	}
	// This replica's idle markers below coll (the write's own among them,
	// on a tree key) go now; the other replicas' when they see coll raised.
	f.letGoBelow(coll)
	fkey, bkey := f.fenceKey(coll), f.belowKey(coll)
	prefix := resource.MemberPrefix(coll)
	mdir := f.prefix + "/m/" + prefix // the markers of every key below coll
	mend := clientv3.GetPrefixRangeEnd(mdir)
	own := f.markerDir(coll)
	older := own + pad(token)
	var since int64 // the revision of the first read: markers put later read coll's record
	for {
		if time.Until(deadline) <= 0 {
			return sharedfence.Draining(w, drain, nil)
		}
		resp, err := f.txn(ctx, nil, append([]clientv3.Op{
			clientv3.OpGet(fkey),
			clientv3.OpGet(bkey),
			clientv3.OpGet(f.fenceKey(prefix), clientv3.WithPrefix()),
			// Not keys only: the create revisions are what is read.
			clientv3.OpGet(mdir, clientv3.WithRange(mend)),
			clientv3.OpGet(own, clientv3.WithRange(older)),
		}, f.replicaReads()...)...)
		if err != nil {
			return fencegate.Unavailable(coll, fmt.Errorf("drain: %w", err))
		}
		rs := resp.Responses
		fk := rs[0].GetResponseRange().Kvs
		if len(fk) == 0 {
			return fencegate.Unavailable(coll, errors.New("drain: the fence record is gone"))
		}
		rec, err := decode(fk[0])
		if err != nil {
			return fencegate.Unavailable(coll, err)
		}
		if rec.Highest != token {
			return nil
		}
		if since == 0 {
			since = resp.Header.Revision
		}
		// The scan: every member write whose record it misses reads
		// coll's level after its own advance, and raises it itself.
		lvl, brev, err := decodeLevel(first(rs[1].GetResponseRange().Kvs))
		if err != nil {
			return fencegate.Unavailable(coll, err)
		}
		mh, err := highestOf(rs[2].GetResponseRange().Kvs)
		if err != nil {
			return fencegate.Unavailable(coll, err)
		}
		if !lvl.Known || lvl.Below < mh {
			// A level the scan raises is not ready: no one has waited yet
			// for coll's own writes in flight, which a member write
			// between coll's token and the new level must wait for.
			next := level{Below: max(lvl.Below, mh), Known: true, Ready: lvl.Ready && lvl.Below >= mh}
			cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(bkey), "=", brev)}
			ops := []clientv3.Op{clientv3.OpPut(bkey, next.encode())}
			if rec.Ready && !lvl.Known {
				// The first scan: the record (created ready, by this
				// write or an operator's advance) stands not ready until
				// the member writes found are waited for. Ready with the
				// level known, it would admit a second write of the
				// token while this one still waits for them.
				nr := rec
				nr.Ready = false
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(fkey), "=", fk[0].ModRevision))
				ops = append(ops, clientv3.OpPut(fkey, nr.encode()))
			}
			if _, err := f.txn(ctx, cmps, ops...); err != nil {
				return fencegate.Unavailable(coll, fmt.Errorf("drain: record the level below: %w", err))
			}
			continue // read again, whichever way the compare went
		}
		if createdBy(rs[3].GetResponseRange().Kvs, since) {
			if err := f.awaitGone(ctx, w, mdir, mend, resp.Header.Revision, deadline, drain); err != nil {
				return err
			}
			continue
		}
		if !rec.Ready && createdBy(rs[4].GetResponseRange().Kvs, since) {
			if err := f.awaitGone(ctx, w, own, older, resp.Header.Revision, deadline, drain); err != nil {
				return err
			}
			continue
		}
		waited, err := f.waitDead(ctx, w, rs[5:8], deadline, drain)
		if err != nil {
			return err
		}
		if waited {
			continue
		}
		if rec.Ready {
			return nil
		}
		if err := f.setReady(ctx, fkey, rec, fk[0].ModRevision); err != nil {
			return fencegate.Unavailable(coll, err)
		}
		return nil // decided again by the caller, whichever way the compare went
	}
}

// createdBy reports whether a key of kvs was created at or before rev.
func createdBy(kvs []*mvccpb.KeyValue, rev int64) bool {
	for _, kv := range kvs {
		if kv.CreateRevision <= rev {
			return true
		}
	}
	return false
}

// belowDrain raises the below levels of the collections of acts (those
// with Raise) to their tokens, then waits for every marker of each
// collection's own key put before, and for the lost replicas, and records
// the levels ready.
func (f *SharedFence) belowDrain(ctx context.Context, w gateway.Write, acts []sharedfence.Action, deadline time.Time, drain time.Duration) error {
	for _, a := range acts {
		if a.Raise {
			if err := f.raiseBelow(ctx, a.Key, a.Token); err != nil {
				return err
			}
		}
	}
	if h := testHookBelowRaised.Load(); h != nil {
		(*h)()
	}
	// This replica's idle markers of the collections go now; the other
	// replicas' when their watch sees the level raised (runWatch: the put
	// of P/b/C not ready announces the raise), so the wait is not
	// markerIdle (TestSharedFenceIdleMarkersNotWaitedOut).
	f.letGo(func(res string) bool {
		return slices.ContainsFunc(acts, func(a sharedfence.Action) bool { return a.Key == res })
	})
	var since int64
	for {
		if time.Until(deadline) <= 0 {
			return sharedfence.Draining(w, drain, nil)
		}
		var reads []clientv3.Op
		for _, a := range acts {
			dir := f.markerDir(a.Key)
			reads = append(reads, clientv3.OpGet(f.belowKey(a.Key)), clientv3.OpGet(dir, clientv3.WithPrefix()))
		}
		resp, err := f.txn(ctx, nil, append(reads, f.replicaReads()...)...)
		if err != nil {
			return fencegate.Unavailable(acts[0].Key, fmt.Errorf("drain: %w", err))
		}
		if since == 0 {
			since = resp.Header.Revision
		}
		rs := resp.Responses
		waitedFor := false
		for i, a := range acts {
			if createdBy(rs[2*i+1].GetResponseRange().Kvs, since) {
				dir := f.markerDir(a.Key)
				if err := f.awaitGone(ctx, w, dir, clientv3.GetPrefixRangeEnd(dir), resp.Header.Revision, deadline, drain); err != nil {
					return err
				}
				waitedFor = true
				break
			}
		}
		if waitedFor {
			continue
		}
		waited, err := f.waitDead(ctx, w, rs[2*len(acts):], deadline, drain)
		if err != nil {
			return err
		}
		if waited {
			continue
		}
		for i, a := range acts {
			kvs := rs[2*i].GetResponseRange().Kvs
			lvl, brev, err := decodeLevel(first(kvs))
			if err != nil {
				return fencegate.Unavailable(a.Key, err)
			}
			if len(kvs) == 0 || lvl.Below != a.Token || lvl.Ready {
				continue // moved on, or ready: decided again by the caller
			}
			lvl.Ready = true
			if _, err := f.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(f.belowKey(a.Key)), "=", brev)},
				clientv3.OpPut(f.belowKey(a.Key), lvl.encode())); err != nil {
				return fencegate.Unavailable(a.Key, fmt.Errorf("drain: set the level below ready: %w", err))
			}
		}
		return nil
	}
}

// testHookBelowRaised, if set (tests only), is called by a below drain
// after its raises, before its first read of the markers.
var testHookBelowRaised atomic.Pointer[func()]

// raiseBelow raises coll's below level to token (never lowers it), not
// ready: the wait for coll's own writes in flight is not done for it.
func (f *SharedFence) raiseBelow(ctx context.Context, coll string, token int64) error {
	bkey := f.belowKey(coll)
	for {
		resp, err := f.txn(ctx, nil, clientv3.OpGet(bkey))
		if err != nil {
			return fencegate.Unavailable(coll, fmt.Errorf("raise the level below to %d: %w", token, err))
		}
		lvl, brev, err := decodeLevel(first(resp.Responses[0].GetResponseRange().Kvs))
		if err != nil {
			return fencegate.Unavailable(coll, err)
		}
		if lvl.Below >= token {
			return nil
		}
		lvl.Below, lvl.Ready = token, false
		put, err := f.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(bkey), "=", brev)}, clientv3.OpPut(bkey, lvl.encode()))
		if err != nil {
			return fencegate.Unavailable(coll, fmt.Errorf("raise the level below to %d: %w", token, err))
		}
		if put.Succeeded {
			return nil
		}
	}
}
