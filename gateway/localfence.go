package gateway

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
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
	// q keeps the store's serving record (nil without opts.Serving); rec
	// waits out a crashed predecessor's writes (nil: none to wait for).
	q              *quiescence
	rec            *recovery
	recoveryBound  func(resource string) time.Duration
	onRecoveryWait func(ctx context.Context, resource string, waited time.Duration, err error)
	onRecoveryEnd  func(waited int)
	members        MemberStore
	seed           maphash.Seed
	shards         [64]fenceShard
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
	// Serving, if set, keeps the durable record of whether this gateway
	// may have writes in flight (docs/design.md, "After a crash (local
	// fence)"): busy before the first forward after a quiet period, quiet
	// once none has been in flight for a moment. Begin reads what a
	// crashed predecessor left and waits out only its writes that could
	// land after a newer one. Nil: no record, and no wait after a crash.
	Serving ServingStore
	// ForwardBound is the longest time a write of any route stays in
	// flight (its upstream timeout and a margin), recorded with the busy
	// mark; RecoveryBound, if set, is that of the routes that may write a
	// resource (default: ForwardBound). A write waiting out a crashed
	// predecessor waits at most its resource's bound from the start.
	ForwardBound  time.Duration
	RecoveryBound func(resource string) time.Duration
	// OnRecoveryWait, if set, is called after each wait for a crashed
	// predecessor's writes; OnRecoveryEnd once that recovery is over, with
	// the number of writes that waited.
	OnRecoveryWait func(ctx context.Context, resource string, waited time.Duration, err error)
	OnRecoveryEnd  func(waited int)
	// QuietAfter is how long no write must be in flight before the fence
	// records itself quiet (default 500ms).
	QuietAfter time.Duration
	// Log receives what cannot be returned (a serving record that failed).
	// Nil: discarded.
	Log func(msg string, args ...any)
	// Members reads the highest token below a key, for ScopeTree writes
	// (hierarchical routes). Nil: the store, if it implements
	// MemberStore; otherwise ScopeTree writes are refused with
	// fence_unavailable.
	Members MemberStore
}

// fenceShard is one 64th of the cache. It is laid out for the garbage
// collector, which marks the whole live heap on every cycle: with an entry
// of strings, list elements and map pointers per resource, a full cache
// (100,000 entries) made marking a third of a repeated write's CPU
// (docs/performance.md). Here entries sit in one slice and refer to each
// other by index, their resource names sit back to back in one byte slice,
// and the index maps a resource's hash to its entry: an idle entry holds no
// pointer for the collector to follow.
type fenceShard struct {
	mu      sync.Mutex
	index   map[uint64]int32 // the resource's hash → its entry (the first, if hashes collide)
	entries []fenceEntry
	names   []byte // each entry's resource, owner and ETag, back to back
	garbage int    // bytes of names no entry uses any more
	free    int32  // an unused entry, chaining the others through next; -1: none
	// head and tail are the most and least recently used entries; -1: none.
	head, tail int32
	n, max     int
}

type fenceEntry struct {
	hash       uint64
	collision  int32 // the next entry whose resource has the same hash; -1: none
	prev, next int32 // the neighbours in the LRU order (next: less recent)

	// The record, fencegate.FenceState without pointers: the resource,
	// owner and ETag are names[name:], in that order.
	name                      int
	resLen, ownerLen, etagLen int
	highest                   int64
	updatedAt                 time.Time

	// The fields below are nil and zero while the resource is idle.

	// loading is non-nil while the record is read from the Store; it is
	// closed when the read finished.
	loading chan struct{}
	// advancing is non-nil while an advance is being made durable; writes
	// for this resource wait for it and then decide again.
	advancing chan struct{}
	// scanning is non-nil while below is read from the store (a ScopeTree
	// write); ScopeTree writes wait for it.
	scanning chan struct{}

	// below is the highest token accepted for a key below this one
	// (Scope): what the store held when belowKnown was set, raised by every
	// ScopeMember write since. It is derived from durable records (each
	// member write made its own key's advance durable), so it need not be
	// written anywhere; an evicted entry reads it again.
	below      int64
	belowKnown bool

	// inflight lists the writes in flight (linked through flight.prev and
	// next: no allocation per write, nothing kept when idle); flying
	// counts them.
	inflight *flight
	flying   int
	older    int           // in-flight writes marked older (flight.older)
	drained  chan struct{} // closed when older drops to 0
}

type flight struct {
	sh    *fenceShard
	e     int32 // index in sh.entries
	token int64
	scope Scope
	// older is set (by recount) while a newer write on this entry waits
	// for this one: its token is below the entry's level for its scope.
	older    bool
	abort    func(cause error)
	bodySent func() bool
	q        *quiescence // counts the fence's writes in flight; nil: none
	once     sync.Once
	// prev and next link the entry's inflight, under the shard lock.
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
		store:          store,
		drainTimeout:   opts.DrainTimeout,
		storeTimeout:   opts.StoreTimeout,
		onDrain:        opts.OnDrain,
		verify:         opts.Verify,
		recoveryBound:  opts.RecoveryBound,
		onRecoveryWait: opts.OnRecoveryWait,
		onRecoveryEnd:  opts.OnRecoveryEnd,
		members:        opts.Members,
		seed:           maphash.MakeSeed(),
	}
	if opts.Serving != nil {
		if opts.ForwardBound <= 0 {
			opts.ForwardBound = fencegate.DefaultUpstreamTimeout + fencegate.DrainMargin
		}
		if opts.QuietAfter <= 0 {
			opts.QuietAfter = quietAfter
		}
		if opts.Log == nil {
			opts.Log = func(string, ...any) {}
		}
		q := &quiescence{store: opts.Serving, bound: opts.ForwardBound, delay: opts.QuietAfter, log: opts.Log}
		q.timer = time.AfterFunc(time.Hour, q.quiet)
		q.timer.Stop()
		f.q = q
	}
	per := (opts.MaxEntries + len(f.shards) - 1) / len(f.shards)
	for i := range f.shards {
		f.shards[i] = fenceShard{index: make(map[uint64]int32), free: -1, head: -1, tail: -1, max: per}
	}
	return f
}

// shard returns resource's shard and hash.
func (f *LocalFence) shard(resource string) (*fenceShard, uint64) {
	h := maphash.String(f.seed, resource)
	return &f.shards[h%uint64(len(f.shards))], h
}

// Admit implements Fence.
func (f *LocalFence) Admit(ctx context.Context, w Write) (Permit, error) {
	sh, h := f.shard(w.Resource)
	drainTimeout := w.DrainTimeout
	if drainTimeout <= 0 {
		drainTimeout = f.drainTimeout
	}
	var drainDeadline <-chan time.Time
	verified := w.Verified
	for {
		sh.mu.Lock()
		i, created := sh.get(h, w.Resource)
		if created {
			if err := f.load(ctx, sh, i, w.Resource); err != nil {
				return nil, err
			}
			continue
		}
		e := &sh.entries[i]
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
		switch w.Scope {
		case ScopeTree:
			if !e.belowKnown {
				if err := f.scanBelow(ctx, sh, i, w.Resource); err != nil {
					return nil, err
				}
				continue
			}
			if w.Token < e.below && e.below > e.highest {
				below := e.below
				sh.mu.Unlock()
				ref := fencegate.StaleError(w.Resource, w.Token, below)
				ref.Message += " (for a key below it)"
				return nil, ref
			}
		case ScopeMember:
			if w.Token < e.highest {
				highest := e.highest
				sh.mu.Unlock()
				ref := fencegate.StaleError(w.Resource, w.Token, highest)
				ref.Message += " (a collection above the key written)"
				return nil, ref
			}
			if w.Token > e.below {
				e.below = w.Token
				e.recount()
			}
		}
		switch highest := e.highest; {
		case w.Token < highest:
			sh.mu.Unlock()
			return nil, fencegate.StaleError(w.Resource, w.Token, highest)
		case w.Token > highest && w.Scope == ScopeMember:
			// A member write never advances the collection's own fence.
		case w.Token > highest:
			if f.verify != nil && !verified {
				sh.mu.Unlock()
				if err := f.verifyToken(ctx, w.Resource, w.Token); err != nil {
					return nil, err
				}
				verified = true
				continue
			}
			if err := f.advance(ctx, sh, i, w.Resource, w.Token, w.Owner); err != nil {
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
		if r := f.rec; r != nil && !r.ended.Load() {
			if until := r.until(w.Resource, w.Token, e.highest, e.below, w.Scope); time.Now().Before(until) {
				// A crashed predecessor's older write may still be on its
				// way upstream here.
				sh.mu.Unlock()
				if err := r.wait(ctx, w.Resource, until); err != nil {
					return nil, err
				}
				continue
			}
		}
		fl := &flight{sh: sh, e: i, token: w.Token, scope: w.Scope, abort: w.Abort, bodySent: w.BodySent, q: f.q}
		e.fly(fl)
		sh.mu.Unlock()
		if f.q != nil {
			// Busy durably before the forward: a crash from here on is
			// waited out by the next process.
			if m := f.q.enter(); m != nil {
				if err := wait(ctx, m.done, nil); err != nil {
					fl.Release()
					return nil, err
				}
				if m.err != nil {
					fl.Release()
					return nil, fencegate.Unavailable(w.Resource, m.err)
				}
			}
		}
		return fl, nil
	}
}

// verifyToken consults opts.Verify, bounded by storeTimeout.
func (f *LocalFence) verifyToken(ctx context.Context, resource string, token int64) error {
	vctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	return fencegate.Unverified(resource, token, f.verify(vctx, resource, token))
}

// load reads the record of resource, entry i, from the store. Called with
// sh.mu held; returns with it released.
func (f *LocalFence) load(ctx context.Context, sh *fenceShard, i int32, resource string) error {
	ch := sh.entries[i].loading
	sh.mu.Unlock()

	// Like an advance, the load is not abandoned because one client went
	// away (other writers may be waiting on it); it is bounded by
	// storeTimeout. Detached, it also costs no registration with the
	// request's context.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.storeTimeout)
	st, err := f.store.LoadFence(sctx, resource)
	cancel()

	sh.mu.Lock()
	sh.entries[i].loading = nil
	if err != nil {
		sh.remove(i)
	} else {
		sh.setState(i, resource, st)
	}
	close(ch)
	sh.mu.Unlock()
	if err != nil {
		return fencegate.Unavailable(resource, fmt.Errorf("load fence: %w", err))
	}
	return nil
}

// advance durably raises the highest token of resource, entry i. Called
// with sh.mu held; returns with it released.
func (f *LocalFence) advance(ctx context.Context, sh *fenceShard, i int32, resource string, token int64, owner string) error {
	ch := make(chan struct{})
	e := &sh.entries[i]
	e.advancing = ch
	// Over older writes in flight (this process's, or a crashed
	// predecessor's not yet waited out): a crash before they end must
	// leave the next process a record that this token's writes wait.
	draining := f.q != nil && e.flying > 0
	if r := f.rec; r != nil && !r.ended.Load() && r.advancing(resource, e.highest) {
		draining = f.q != nil
	}
	sh.mu.Unlock()

	// The advance must not be abandoned half way because one client went
	// away: other writers are waiting on it. It is bounded by storeTimeout.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.storeTimeout)
	var err error
	if draining {
		if err = f.q.draining(sctx, resource, token); err != nil {
			err = fmt.Errorf("record the advance over writes in flight: %w", err)
		}
	}
	var st fencegate.FenceState
	if err == nil {
		st, err = f.store.AdvanceFence(sctx, resource, token, owner)
	}
	cancel()

	sh.mu.Lock()
	e = &sh.entries[i]
	e.advancing = nil
	if err == nil && st.Highest > e.highest {
		sh.setState(i, resource, st)
		e.recount()
	}
	close(ch)
	sh.mu.Unlock()
	if err != nil {
		return fencegate.Unavailable(resource, fmt.Errorf("advance fence to %d: %w", token, err))
	}
	return nil
}

// scanBelow reads from the store the highest token recorded below
// resource, entry i. Called with sh.mu held; returns with it released.
func (f *LocalFence) scanBelow(ctx context.Context, sh *fenceShard, i int32, res string) error {
	if ch := sh.entries[i].scanning; ch != nil {
		sh.mu.Unlock()
		return wait(ctx, ch, nil)
	}
	ms := f.members
	if ms == nil {
		ms, _ = f.store.(MemberStore)
	}
	if ms == nil {
		sh.mu.Unlock()
		return fencegate.Unavailable(res, errors.New("the store cannot read the fences below a key (hierarchical route)"))
	}
	ch := make(chan struct{})
	sh.entries[i].scanning = ch
	sh.mu.Unlock()

	// Detached and bounded like a load: other writers may wait on it.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.storeTimeout)
	below, err := ms.HighestBelow(sctx, resource.MemberPrefix(res))
	cancel()

	sh.mu.Lock()
	e := &sh.entries[i]
	e.scanning = nil
	if err == nil {
		e.belowKnown = true
		if below > e.below {
			e.below = below
			e.recount()
		}
	}
	close(ch)
	sh.mu.Unlock()
	if err != nil {
		return fencegate.Unavailable(res, fmt.Errorf("read fences below: %w", err))
	}
	return nil
}

// recount marks the writes in flight that a newer write must wait for
// (I2): those whose token is below the entry's level for their scope, the
// highest token for ScopeKey and ScopeMember writes, and for ScopeTree
// writes also the highest token accepted below. It aborts those whose
// request bodies have not been fully sent. Called with the shard lock
// held, after a level rose.
func (e *fenceEntry) recount() {
	n := 0
	for fl := e.inflight; fl != nil; fl = fl.next {
		level := e.highest
		if fl.scope == ScopeTree {
			level = max(level, e.below)
		}
		fl.older = fl.token < level
		if !fl.older {
			continue
		}
		n++
		if fl.abort != nil && fl.bodySent != nil && !fl.bodySent() {
			fl.abort(ErrSuperseded)
		}
	}
	e.older = n
	switch {
	case n > 0 && e.drained == nil:
		e.drained = make(chan struct{})
	case n == 0 && e.drained != nil:
		close(e.drained)
		e.drained = nil
	}
}

// Release implements Permit.
func (fl *flight) Release() {
	fl.once.Do(func() {
		sh := fl.sh
		sh.mu.Lock()
		e := &sh.entries[fl.e]
		e.land(fl)
		if fl.older {
			e.older--
			if e.older == 0 {
				close(e.drained)
				e.drained = nil
			}
		}
		sh.mu.Unlock()
		if fl.q != nil {
			fl.q.leave()
		}
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
	sh, h := f.shard(resource)
	sh.mu.Lock()
	if i := sh.lookup(h, resource); i >= 0 && sh.entries[i].loading == nil {
		e := &sh.entries[i]
		st := sh.state(i)
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
	for {
		sh, i, err := f.settled(ctx, resource)
		if err != nil {
			return fencegate.FenceState{}, err
		}
		if e := &sh.entries[i]; token <= e.highest {
			st := sh.state(i)
			st.Ready = e.older == 0
			sh.mu.Unlock()
			return st, nil
		}
		if err := f.advance(ctx, sh, i, resource, token, owner); err != nil {
			return fencegate.FenceState{}, err
		}
	}
}

// settled returns resource's shard and entry once it is loaded and no
// advance or reset of it is under way (waiting for them to end), with the
// shard's lock held. On an error the lock is not held.
func (f *LocalFence) settled(ctx context.Context, resource string) (*fenceShard, int32, error) {
	sh, h := f.shard(resource)
	for {
		sh.mu.Lock()
		i, created := sh.get(h, resource)
		if created {
			if err := f.load(ctx, sh, i, resource); err != nil {
				return nil, -1, err
			}
			continue
		}
		e := &sh.entries[i]
		ch := e.loading
		if ch == nil {
			ch = e.advancing
		}
		if ch == nil {
			return sh, i, nil
		}
		sh.mu.Unlock()
		if err := wait(ctx, ch, nil); err != nil {
			return nil, -1, err
		}
	}
}

// The cache's bookkeeping below is called with sh.mu held. An index into
// sh.entries stays valid while the lock is released as long as the entry
// cannot be evicted (it is loading, advancing or has writes in flight);
// a pointer into sh.entries only until the next get.

// lookup returns the entry of resource (hash h), or -1.
func (sh *fenceShard) lookup(h uint64, resource string) int32 {
	i, ok := sh.index[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = sh.entries[i].collision {
		if e := &sh.entries[i]; string(sh.names[e.name:e.name+e.resLen]) == resource {
			return i
		}
	}
	return -1
}

// get returns the entry of resource (hash h), most recently used now,
// creating it (to be loaded by the caller, with load) if absent.
func (sh *fenceShard) get(h uint64, resource string) (int32, bool) {
	if i := sh.lookup(h, resource); i >= 0 {
		sh.unlink(i)
		sh.pushFront(i)
		return i, false
	}
	i := sh.free
	if i >= 0 {
		sh.free = sh.entries[i].next
	} else {
		i = int32(len(sh.entries))
		sh.entries = append(sh.entries, fenceEntry{})
	}
	first, collides := sh.index[h]
	if !collides {
		first = -1
	}
	// Created in the loading state, so evict below cannot drop it.
	sh.entries[i] = fenceEntry{hash: h, collision: first, loading: make(chan struct{})}
	sh.index[h] = i
	sh.pushFront(i)
	sh.setName(i, resource, "", "")
	sh.n++
	sh.evict()
	return i, true
}

// evict drops idle entries beyond the shard's budget, oldest first. An entry
// with writes in flight, or one being loaded or advanced, stays: dropping it
// would lose the drain bookkeeping. Idle entries lose nothing, since their
// state is durable in the store (I1).
func (sh *fenceShard) evict() {
	for i := sh.tail; i >= 0 && sh.n > sh.max; {
		e := &sh.entries[i]
		prev := e.prev
		if e.flying == 0 && e.loading == nil && e.advancing == nil && e.scanning == nil {
			sh.remove(i)
		}
		i = prev
	}
}

// remove drops entry i from the cache.
func (sh *fenceShard) remove(i int32) {
	e := &sh.entries[i]
	if sh.index[e.hash] == i {
		if e.collision >= 0 {
			sh.index[e.hash] = e.collision
		} else {
			delete(sh.index, e.hash)
		}
	} else {
		for j := sh.index[e.hash]; j >= 0; j = sh.entries[j].collision {
			if sh.entries[j].collision == i {
				sh.entries[j].collision = e.collision
				break
			}
		}
	}
	sh.unlink(i)
	sh.garbage += e.resLen + e.ownerLen + e.etagLen
	*e = fenceEntry{next: sh.free}
	sh.free = i
	sh.n--
}

func (sh *fenceShard) pushFront(i int32) {
	e := &sh.entries[i]
	e.prev, e.next = -1, sh.head
	if sh.head >= 0 {
		sh.entries[sh.head].prev = i
	} else {
		sh.tail = i
	}
	sh.head = i
}

func (sh *fenceShard) unlink(i int32) {
	e := &sh.entries[i]
	if e.prev >= 0 {
		sh.entries[e.prev].next = e.next
	} else {
		sh.head = e.next
	}
	if e.next >= 0 {
		sh.entries[e.next].prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

// state returns entry i's record (Ready unset).
func (sh *fenceShard) state(i int32) fencegate.FenceState {
	e := &sh.entries[i]
	b := sh.names[e.name : e.name+e.resLen+e.ownerLen+e.etagLen]
	return fencegate.FenceState{
		Resource:  string(b[:e.resLen]),
		Highest:   e.highest,
		Owner:     string(b[e.resLen : e.resLen+e.ownerLen]),
		ETag:      string(b[e.resLen+e.ownerLen:]),
		UpdatedAt: e.updatedAt,
	}
}

// setState stores the record of resource, entry i, as the store returned it.
func (sh *fenceShard) setState(i int32, resource string, st fencegate.FenceState) {
	e := &sh.entries[i]
	e.highest, e.updatedAt = st.Highest, st.UpdatedAt
	if st.Owner != "" || st.ETag != "" || e.ownerLen+e.etagLen > 0 {
		sh.setName(i, resource, st.Owner, st.ETag)
	}
}

// setName stores entry i's resource, owner and ETag at the end of names.
// The bytes they replace are garbage, reclaimed by rewriting names once
// they are most of it. Entry i must be in the LRU list.
func (sh *fenceShard) setName(i int32, resource, owner, etag string) {
	e := &sh.entries[i]
	sh.garbage += e.resLen + e.ownerLen + e.etagLen
	e.name = len(sh.names)
	e.resLen, e.ownerLen, e.etagLen = len(resource), len(owner), len(etag)
	sh.names = append(append(append(sh.names, resource...), owner...), etag...)
	if sh.garbage > 64<<10 && sh.garbage > len(sh.names)/2 {
		sh.compact()
	}
}

// compact rewrites names with only the bytes entries use.
func (sh *fenceShard) compact() {
	names := make([]byte, 0, 2*(len(sh.names)-sh.garbage))
	for i := sh.head; i >= 0; i = sh.entries[i].next {
		e := &sh.entries[i]
		n := e.resLen + e.ownerLen + e.etagLen
		off := len(names)
		names = append(names, sh.names[e.name:e.name+n]...)
		e.name = off
	}
	sh.names, sh.garbage = names, 0
}

// cached reports how many resources the fence holds in memory (for tests
// and metrics).
func (f *LocalFence) cached() int {
	n := 0
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		n += sh.n
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
