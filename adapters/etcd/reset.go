package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// LowerFence lowers resource's fence record to `to`, not ready, for `fence
// reset`: the one path that lowers a fence (docs/design.md I7). It does not
// decide whether the lowering is safe: etcd holds no record of the tokens
// issued (no coordinator runs on it), so the caller asks the lock service
// the resource's tokens come from first (server/etcd.go: `to` must be its
// current lock holder's token).
//
// One Txn, with three compares: the record and the ETag record (whose
// token is lowered to `to` with it) are the ones read (their mod
// revisions), and no in-flight marker of a token above `to` exists. Such a
// marker is a write admitted under the old, higher fence, which the drain
// of `to` would not wait for (it waits for the markers below its token):
// then the reset is refused, retry (gateway.ErrWritesInFlight, answered
// 409 as the local fence's). A marker put after the Txn is read with the
// record at its own revision, so its write sees `to` and is an advance
// (verified, or drained). Not ready: the first write of `to` drains the
// markers below it, as after an advance. A fence at or below `to` (or none)
// is left as it is.
//
// vouch, if not nil, is asked after each read of a record to be lowered,
// before the Txn that lowers it (an error refuses the reset): `to` is
// vouched for while the record read is current. Asked before the read
// only, the holder of `to` could have released the lock, and a later
// holder written (advancing the fence above it) in between: the reset
// would then lower the fence below a token accepted, and the released
// holder's late write would land after the newer one's.
func (f *Store) LowerFence(ctx context.Context, resource string, to int64, owner string, vouch func(context.Context) error) (fencegate.FenceState, error) {
	if to <= 0 {
		return fencegate.FenceState{}, fencegate.ErrResetNotPositive
	}
	if strings.Contains(resource, "\x00") {
		return fencegate.FenceState{}, fencegate.Unavailable(resource, errNUL)
	}
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	key := f.fenceKey(resource)
	above, end := f.markerDir(resource)+pad(to+1), clientv3.GetPrefixRangeEnd(f.markerDir(resource))
	ekey := f.etagKey(resource)
	f.requests.Add(1)
	var resp, eresp *clientv3.GetResponse
	// Markers above `to` that no write holds any more are deleted by their
	// replica within idleGone: the reset waits that long for them before
	// it refuses.
	idleUntil := time.Now().Add(idleGone)
	if dl, ok := ctx.Deadline(); ok {
		// Leave the Txns after the wait a quarter of the store timeout.
		idleUntil = minTime(idleUntil, dl.Add(-f.storeTimeout/4))
	}
	tr, err := f.client.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(ekey)).Commit()
	if err == nil {
		resp, eresp = rangeOf(tr, 0), rangeOf(tr, 1)
	}
	for {
		if err != nil {
			return fencegate.FenceState{}, fencegate.Unavailable(resource, fmt.Errorf("reset fence to %d: %w", to, err))
		}
		if len(resp.Kvs) == 0 {
			return fencegate.FenceState{Resource: resource, Ready: true}, nil
		}
		cur, err := decode(resp.Kvs[0])
		if err != nil {
			return fencegate.FenceState{}, fencegate.Unavailable(resource, err)
		}
		if cur.Highest <= to {
			return cur.state(resource), nil
		}
		if vouch != nil {
			if err := vouch(ctx); err != nil {
				return fencegate.FenceState{}, err
			}
		}
		rec := record{Highest: to, Owner: owner, ETag: cur.ETag, Updated: time.Now().UnixMilli()}
		ops := []clientv3.Op{clientv3.OpPut(key, rec.encode())}
		erev := int64(0)
		if len(eresp.Kvs) > 0 {
			// The ETag record's token is lowered too (the version it names
			// kept): a record is never replaced by an older token's, so
			// one left at the mistaken token would refuse every record of
			// the new value's writes.
			e, err := decodeETag(eresp.Kvs[0])
			if err != nil {
				return fencegate.FenceState{}, fencegate.Unavailable(resource, err)
			}
			if erev = eresp.Kvs[0].ModRevision; e.Token > to {
				ops = append(ops, clientv3.OpPut(ekey, etagRecord{ETag: e.ETag, Token: to}.encode()))
			}
		}
		f.requests.Add(1)
		tr, terr := f.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision),
				clientv3.Compare(clientv3.ModRevision(ekey), "=", erev),
				clientv3.Compare(clientv3.CreateRevision(above), "=", 0).WithRange(end)).
			Then(append(ops, f.forgetLevels(resource)...)...).
			Else(clientv3.OpGet(key), clientv3.OpGet(above, clientv3.WithRange(end), clientv3.WithCountOnly()), clientv3.OpGet(ekey)).Commit()
		if terr != nil {
			return fencegate.FenceState{}, fencegate.Unavailable(resource, fmt.Errorf("reset fence to %d: %w", to, terr))
		}
		if tr.Succeeded {
			return rec.state(resource), nil
		}
		if n := tr.Responses[1].GetResponseRange().Count; n > 0 && time.Now().Before(idleUntil) {
			werr := f.waitGone(ctx, above, end, tr.Header.Revision, idleUntil)
			if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
				return fencegate.FenceState{}, fencegate.Unavailable(resource, fmt.Errorf("reset fence to %d: watch the markers above it: %w", to, werr))
			}
			resp, eresp = rangeOf(tr, 0), rangeOf(tr, 2)
			continue // read again: gone, or still there past idleGone
		}
		if n := tr.Responses[1].GetResponseRange().Count; n > 0 {
			return fencegate.FenceState{}, &fencegate.Error{
				Code:     fencegate.CodeFenceDraining,
				Message:  fmt.Sprintf("%d in-flight markers of tokens above %d hold %s (writes admitted under the fence being lowered); a fence is lowered only when none is (retry)", n, to, resource),
				Resource: resource, RetryAfter: time.Second, Err: gateway.ErrWritesInFlight,
			}
		}
		// A record changed meanwhile: decide on the new ones.
		resp, eresp = rangeOf(tr, 0), rangeOf(tr, 2)
	}
}

// idleGone bounds how long a marker no write holds is kept: markerIdle,
// plus the half of it between two looks of the replica's lane, and a
// round trip.
const idleGone = markerIdle*3/2 + 200*time.Millisecond

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// forgetLevels deletes, in a reset's Txn, the below levels of the
// collections above res (and of their tree keys): the level a lowered
// member raised would otherwise keep refusing the collections' owners for
// a token that no longer counts. A level that is gone is "not known": the
// collection's next write compares every member record again
// (fence_tree.go), as after an import, so no token the records still hold
// is forgotten. PostgreSQL recomputes its levels instead (resetBelow).
func (f *Store) forgetLevels(res string) []clientv3.Op {
	var ops []clientv3.Op
	for _, p := range resource.Parents(res) {
		ops = append(ops, clientv3.OpDelete(f.belowKey(p)))
		if tk := gateway.TreeKey(p); tk != p {
			ops = append(ops, clientv3.OpDelete(f.belowKey(tk)))
		}
	}
	return ops
}

// rangeOf is the answer of a Txn's i-th operation, a Get.
func rangeOf(tr *clientv3.TxnResponse, i int) *clientv3.GetResponse {
	return (*clientv3.GetResponse)(tr.Responses[i].GetResponseRange())
}
