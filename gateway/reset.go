package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
)

// errWritesInFlight is the cause of Lower's refusal while writes of the
// resource are in flight. The admin API answers it 409, as every reset it
// refuses, rather than fence_draining's own 503: no newer write waits on
// a drain, the operator retries the reset.
var errWritesInFlight = errors.New("writes in flight")

// ErrWritesInFlight is the cause a shared fence's reset gives for the same
// refusal (adapters/etcd.LowerFence), answered 409 as the local one.
var ErrWritesInFlight = errWritesInFlight

// ResetFunc lowers the durable fence record of a resource (the store's
// ResetFence); it enforces the reset rule of docs/design.md I7 atomically
// with the store's lease records and returns the record as stored.
type ResetFunc func(ctx context.Context) (fencegate.FenceState, error)

// Lower runs reset for resource with every write of the resource held off,
// and then serves the record reset returned. It is the in-memory half of
// `fencegate fence reset`: the cache must not keep the old, higher token
// (that would only refuse more, but the reset would not take effect), and
// no write may be in flight under the old token, whose drain bookkeeping
// would not survive a lowering: then Lower refuses (errWritesInFlight,
// retry).
func (f *LocalFence) Lower(ctx context.Context, resource string, reset ResetFunc) (fencegate.FenceState, error) {
	sh, i, err := f.settled(ctx, resource)
	if err != nil {
		return fencegate.FenceState{}, err
	}
	if n := sh.entries[i].flying; n > 0 {
		sh.mu.Unlock()
		return fencegate.FenceState{}, &fencegate.Error{
			Code:     fencegate.CodeFenceDraining,
			Message:  fmt.Sprintf("%d writes for %s are in flight; a fence is lowered only when none is (retry)", n, resource),
			Resource: resource, RetryAfter: time.Second, Err: errWritesInFlight,
		}
	}
	// Hold writes off the way an advance does: they wait on advancing.
	done := make(chan struct{})
	sh.entries[i].advancing = done
	sh.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.storeTimeout)
	st, err := reset(sctx)
	cancel()

	sh.mu.Lock()
	e := &sh.entries[i]
	e.advancing = nil
	if err == nil {
		st.Resource = resource
		sh.setState(i, resource, st)
		e.older = 0
	}
	close(done)
	sh.mu.Unlock()
	if err != nil {
		if _, ok := fencegate.Refusal(err); ok {
			return fencegate.FenceState{}, err
		}
		return fencegate.FenceState{}, fencegate.Unavailable(resource, fmt.Errorf("reset fence: %w", err))
	}
	st.Ready = true
	return st, nil
}
