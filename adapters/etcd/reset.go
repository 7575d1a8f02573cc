package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// LowerFence lowers resource's fence record to `to`, not ready, for `fence
// reset`: the one path that lowers a fence (docs/design.md I7). It does not
// decide whether the lowering is safe: etcd holds no record of the tokens
// issued (no coordinator runs on it), so the caller asks the lock service
// the resource's tokens come from first (server/etcd.go: `to` must be its
// current lock holder's token).
//
// One Txn, with two compares: the record is the one read (its mod
// revision), and no in-flight marker of a token above `to` exists. Such a
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
	f.requests.Add(1)
	resp, err := f.client.Get(ctx, key)
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
		f.requests.Add(1)
		tr, terr := f.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision),
				clientv3.Compare(clientv3.CreateRevision(above), "=", 0).WithRange(end)).
			Then(clientv3.OpPut(key, rec.encode())).
			Else(clientv3.OpGet(key), clientv3.OpGet(above, clientv3.WithRange(end), clientv3.WithCountOnly())).Commit()
		if terr != nil {
			return fencegate.FenceState{}, fencegate.Unavailable(resource, fmt.Errorf("reset fence to %d: %w", to, terr))
		}
		if tr.Succeeded {
			return rec.state(resource), nil
		}
		if n := tr.Responses[1].GetResponseRange().Count; n > 0 {
			return fencegate.FenceState{}, &fencegate.Error{
				Code:     fencegate.CodeFenceDraining,
				Message:  fmt.Sprintf("%d in-flight markers of tokens above %d hold %s (writes admitted under the fence being lowered); a fence is lowered only when none is (retry)", n, to, resource),
				Resource: resource, RetryAfter: time.Second, Err: gateway.ErrWritesInFlight,
			}
		}
		// The record changed meanwhile: decide on the new one.
		resp = (*clientv3.GetResponse)(tr.Responses[0].GetResponseRange())
	}
}
