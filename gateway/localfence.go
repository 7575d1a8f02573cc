package gateway

import (
	"container/list"
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// LocalFence is the fence of a gateway that is the only writer for its
// resources (fence mode "local"). Per resource it keeps the highest token,
// and the writes in flight, in memory; only an advance touches the Store, and
// the Store makes it durable before the first write with the new token is
// admitted. A repeated token costs a map lookup and no I/O.
//
// Memory is bounded: at most MaxEntries idle resources are cached (least
// recently used first out); an evicted resource is loaded again from the
// Store on its next write.
type LocalFence struct {
	store Store
	// DrainTimeout bounds how long a newer write waits for older in-flight
	// writes; past it the newer write is refused with fence_draining. It
	// should exceed the upstream timeout, after which every older write has
	// ended one way or another.
	drainTimeout time.Duration
	// storeTimeout bounds one Store call; past it the write is refused with
	// fence_unavailable (I4).
	storeTimeout time.Duration
	onDrain      func(ctx context.Context, resource string, waited time.Duration, err error)
	verify       func(ctx context.Context, resource string, token int64) error
	seed         maphash.Seed
	shards       [64]fenceShard
}

// LocalFenceOptions tune a LocalFence. Zero values pick the defaults.
type LocalFenceOptions struct {
	MaxEntries   int           // default 100000 cached resources
	DrainTimeout time.Duration // default 31s (the default upstream timeout + 1s)
	StoreTimeout time.Duration // default 5s
	// OnDrain, if set, is called after each wait for older in-flight writes
	// (I2) with its duration and the error that ended it, if any (metrics,
	// tracing). Nil: nothing is reported.
	OnDrain func(ctx context.Context, resource string, waited time.Duration, err error)
	// Verify, if set, is consulted before a write's token advances the
	// fence, never on the repeated-token path (which stays free of I/O). A
	// *fencegate.Error it returns (unknown_fencing_token) refuses the write;
	// any other error refuses it with fence_unavailable. Nil: every token
	// is accepted.
	Verify func(ctx context.Context, resource string, token int64) error
}

type fenceShard struct {
	mu  sync.Mutex
	m   map[string]*fenceEntry
	lru list.List // of *fenceEntry; front is most recently used
	max int
}

type fenceEntry struct {
	resource string
	elem     *list.Element
	state    fencegate.FenceState

	// loading is non-nil while the record is read from the Store; it is
	// closed when the read finished.
	loading chan struct{}
	// advancing is non-nil while an advance is being made durable; writes
	// for this resource wait for it and then decide again.
	advancing chan struct{}

	// inflight lists the writes in flight (linked through flight.prev and
	// next: no allocation per write, nothing kept when idle); flying
	// counts them.
	inflight *flight
	flying   int
	older    int           // in-flight writes with a token below state.Highest
	drained  chan struct{} // closed when older drops to 0
}

type flight struct {
	f        *LocalFence
	sh       *fenceShard
	e        *fenceEntry
	token    int64
	abort    func(cause error)
	bodySent func() bool
	once     sync.Once
	// prev and next link e.inflight, under the shard lock.
	prev, next *flight
}

var _ Fence = (*LocalFence)(nil)

// NewLocalFence returns a fence over store.
func NewLocalFence(store Store, opts LocalFenceOptions) *LocalFence {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 100000
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = fencegate.DefaultDrainTimeout
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = fencegate.DefaultStoreTimeout
	}
	f := &LocalFence{
		store:        store,
		drainTimeout: opts.DrainTimeout,
		storeTimeout: opts.StoreTimeout,
		onDrain:      opts.OnDrain,
		verify:       opts.Verify,
		seed:         maphash.MakeSeed(),
	}
	per := (opts.MaxEntries + len(f.shards) - 1) / len(f.shards)
	for i := range f.shards {
		f.shards[i].m = make(map[string]*fenceEntry)
		f.shards[i].max = per
	}
	return f
}

func (f *LocalFence) shard(resource string) *fenceShard {
	return &f.shards[maphash.String(f.seed, resource)%uint64(len(f.shards))]
}

// Admit implements Fence.
func (f *LocalFence) Admit(ctx context.Context, w Write) (Permit, error) {
	sh := f.shard(w.Resource)
	drainTimeout := w.DrainTimeout
	if drainTimeout <= 0 {
		drainTimeout = f.drainTimeout
	}
	var drainDeadline <-chan time.Time
	verified := false
	for {
		sh.mu.Lock()
		e, created := sh.get(w.Resource)
		if created {
			if err := f.load(ctx, sh, e); err != nil {
				return nil, err
			}
			continue
		}
		if ch := e.loading; ch != nil {
			sh.mu.Unlock()
			if err := wait(ctx, ch, nil); err != nil {
				return nil, err
			}
			continue
		}
		if ch := e.advancing; ch != nil {
			sh.mu.Unlock()
			if err := wait(ctx, ch, nil); err != nil {
				return nil, err
			}
			continue
		}
		switch highest := e.state.Highest; {
		case w.Token < highest:
			sh.mu.Unlock()
			return nil, fencegate.StaleError(w.Resource, w.Token, highest)
		case w.Token > highest:
			if f.verify != nil && !verified {
				sh.mu.Unlock()
				if err := f.verifyToken(ctx, w.Resource, w.Token); err != nil {
					return nil, err
				}
				verified = true
				continue
			}
			if err := f.advance(ctx, sh, e, w.Token, w.Owner); err != nil {
				return nil, err
			}
			continue // decide again: the store may hold an even newer token
		}
		if e.older > 0 {
			// Drain (I2): an older write is still in flight upstream.
			ch := e.drained
			sh.mu.Unlock()
			if drainDeadline == nil {
				t := time.NewTimer(drainTimeout)
				defer t.Stop()
				drainDeadline = t.C
			}
			waitStart := time.Now()
			err := wait(ctx, ch, drainDeadline)
			if f.onDrain != nil {
				f.onDrain(ctx, w.Resource, time.Since(waitStart), err)
			}
			if err != nil {
				if err == errDrainTimeout {
					return nil, fencegate.Draining(w.Resource, w.Token, drainTimeout, nil)
				}
				return nil, err
			}
			continue
		}
		fl := &flight{f: f, sh: sh, e: e, token: w.Token, abort: w.Abort, bodySent: w.BodySent}
		e.fly(fl)
		sh.mu.Unlock()
		return fl, nil
	}
}

// verifyToken consults opts.Verify, bounded by storeTimeout.
func (f *LocalFence) verifyToken(ctx context.Context, resource string, token int64) error {
	vctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	return fencegate.Unverified(resource, token, f.verify(vctx, resource, token))
}

// load reads e's record from the store. Called with sh.mu held; returns with
// it released.
func (f *LocalFence) load(ctx context.Context, sh *fenceShard, e *fenceEntry) error {
	ch := e.loading
	sh.mu.Unlock()

	sctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	st, err := f.store.LoadFence(sctx, e.resource)
	cancel()

	sh.mu.Lock()
	e.loading = nil
	if err != nil {
		sh.remove(e)
	} else {
		st.Resource = e.resource
		e.state = st
	}
	close(ch)
	sh.mu.Unlock()
	if err != nil {
		return fencegate.Unavailable(e.resource, fmt.Errorf("load fence: %w", err))
	}
	return nil
}

// advance durably raises e's highest token. Called with sh.mu held; returns
// with it released.
func (f *LocalFence) advance(ctx context.Context, sh *fenceShard, e *fenceEntry, token int64, owner string) error {
	ch := make(chan struct{})
	e.advancing = ch
	sh.mu.Unlock()

	// The advance must not be abandoned half way because one client went
	// away: other writers are waiting on it. It is bounded by storeTimeout.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.storeTimeout)
	st, err := f.store.AdvanceFence(sctx, e.resource, token, owner)
	cancel()

	sh.mu.Lock()
	e.advancing = nil
	if err == nil && st.Highest > e.state.Highest {
		st.Resource = e.resource
		e.state = st
		f.supersede(e)
	}
	close(ch)
	sh.mu.Unlock()
	if err != nil {
		return fencegate.Unavailable(e.resource, fmt.Errorf("advance fence to %d: %w", token, err))
	}
	return nil
}

// supersede marks every write in flight as older than the new highest token,
// and aborts those whose request bodies have not been fully sent. Called with
// the shard lock held.
func (f *LocalFence) supersede(e *fenceEntry) {
	e.older = e.flying
	if e.older > 0 && e.drained == nil {
		e.drained = make(chan struct{})
	}
	for fl := e.inflight; fl != nil; fl = fl.next {
		if fl.abort != nil && fl.bodySent != nil && !fl.bodySent() {
			fl.abort(ErrSuperseded)
		}
	}
}

// Release implements Permit.
func (fl *flight) Release() {
	fl.once.Do(func() {
		sh, e := fl.sh, fl.e
		sh.mu.Lock()
		e.land(fl)
		if fl.token < e.state.Highest {
			e.older--
			if e.older == 0 {
				close(e.drained)
				e.drained = nil
			}
		}
		sh.mu.Unlock()
	})
}

// fly adds fl to e's writes in flight. Called with the shard lock held.
func (e *fenceEntry) fly(fl *flight) {
	fl.next = e.inflight
	if e.inflight != nil {
		e.inflight.prev = fl
	}
	e.inflight = fl
	e.flying++
}

// land removes fl from e's writes in flight. Called with the shard lock
// held.
func (e *fenceEntry) land(fl *flight) {
	if fl.prev != nil {
		fl.prev.next = fl.next
	} else {
		e.inflight = fl.next
	}
	if fl.next != nil {
		fl.next.prev = fl.prev
	}
	fl.prev, fl.next = nil, nil
	e.flying--
}

// State implements Fence.
func (f *LocalFence) State(ctx context.Context, resource string) (fencegate.FenceState, error) {
	sh := f.shard(resource)
	sh.mu.Lock()
	if e, ok := sh.m[resource]; ok && e.loading == nil {
		st := e.state
		st.Ready = e.older == 0 && e.advancing == nil
		sh.mu.Unlock()
		return st, nil
	}
	sh.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	st, err := f.store.LoadFence(sctx, resource)
	if err != nil {
		return st, fencegate.Unavailable(resource, err)
	}
	st.Resource = resource
	st.Ready = true
	return st, nil
}

// Advance implements Fence. It goes through the same path as a write's
// advance, so in-flight writes with older tokens are superseded too.
func (f *LocalFence) Advance(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	sh := f.shard(resource)
	for {
		e, err := f.settled(ctx, sh, resource)
		if err != nil {
			return fencegate.FenceState{}, err
		}
		if token <= e.state.Highest {
			st := e.state
			st.Ready = e.older == 0
			sh.mu.Unlock()
			return st, nil
		}
		if err := f.advance(ctx, sh, e, token, owner); err != nil {
			return fencegate.FenceState{}, err
		}
	}
}

// settled returns resource's entry once it is loaded and no advance or
// reset of it is under way (waiting for them to end), with sh.mu held. On
// an error sh.mu is not held.
func (f *LocalFence) settled(ctx context.Context, sh *fenceShard, resource string) (*fenceEntry, error) {
	for {
		sh.mu.Lock()
		e, created := sh.get(resource)
		if created {
			if err := f.load(ctx, sh, e); err != nil {
				return nil, err
			}
			continue
		}
		ch := e.loading
		if ch == nil {
			ch = e.advancing
		}
		if ch == nil {
			return e, nil
		}
		sh.mu.Unlock()
		if err := wait(ctx, ch, nil); err != nil {
			return nil, err
		}
	}
}

// get returns the entry for resource, creating it (to be loaded by the
// caller, with load) if absent.
// Called with sh.mu held.
func (sh *fenceShard) get(resource string) (*fenceEntry, bool) {
	if e, ok := sh.m[resource]; ok {
		sh.lru.MoveToFront(e.elem)
		return e, false
	}
	// Created in the loading state, so evict below cannot drop it.
	e := &fenceEntry{resource: resource, loading: make(chan struct{})}
	e.elem = sh.lru.PushFront(e)
	sh.m[resource] = e
	sh.evict()
	return e, true
}

// evict drops idle entries beyond the shard's budget, oldest first. An entry
// with writes in flight, or one being loaded or advanced, stays: dropping it
// would lose the drain bookkeeping. Idle entries lose nothing, since their
// state is durable in the store.
func (sh *fenceShard) evict() {
	for el := sh.lru.Back(); el != nil && len(sh.m) > sh.max; {
		e := el.Value.(*fenceEntry)
		prev := el.Prev()
		if e.flying == 0 && e.loading == nil && e.advancing == nil {
			sh.remove(e)
		}
		el = prev
	}
}

func (sh *fenceShard) remove(e *fenceEntry) {
	if cur, ok := sh.m[e.resource]; ok && cur == e {
		delete(sh.m, e.resource)
		sh.lru.Remove(e.elem)
	}
}

// cached reports how many resources the fence holds in memory (for tests
// and metrics).
func (f *LocalFence) cached() int {
	n := 0
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

type fenceWaitError string

func (e fenceWaitError) Error() string { return string(e) }

const errDrainTimeout = fenceWaitError("drain timeout")

// wait blocks until ch is closed, ctx is done or deadline fires.
func wait(ctx context.Context, ch <-chan struct{}, deadline <-chan time.Time) error {
	select {
	case <-ch:
		return nil
	case <-deadline:
		return errDrainTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}
