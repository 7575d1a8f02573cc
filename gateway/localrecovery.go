package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/clock"
)

// ServingStore is implemented by stores that keep, for a local fence, a
// durable record of whether the gateway serving from them may have writes
// in flight (docs/design.md, "After a crash (local fence)"). A process that
// crashes leaves its writes on their way upstream and its successor has no
// record of them: the record says whether there can be any, and where.
type ServingStore interface {
	// LastRun returns what the previous process serving from the store
	// left (it changes nothing: the fence then records itself quiet, or
	// busy while it waits out a crashed predecessor's writes).
	LastRun(ctx context.Context) (PreviousRun, error)
	// MarkServing records durably that writes may be in flight from now
	// on (busy, with bound the longest forward bound of any route), or
	// that none is (quiet). It returns once the record is durable.
	MarkServing(ctx context.Context, busy bool, bound time.Duration) error
	// MarkDraining records durably that resource's fence was advanced to
	// token at the time at while older writes were still in flight. A
	// quiet record forgets every such record made before it.
	MarkDraining(ctx context.Context, resource string, token int64, at time.Time) error
	// EndServing records that the gateway stopped with no write in flight.
	EndServing(ctx context.Context) error
}

// PreviousRun is what the previous process serving from a store left.
type PreviousRun struct {
	// Unclean: it stopped while writes it admitted may have been in
	// flight (it crashed while busy).
	Unclean bool
	// Bound is the longest forward bound of its routes, as it recorded
	// when it became busy (zero: not recorded).
	Bound time.Duration
	// Draining are the resources whose fence it advanced while older
	// writes were still in flight, with the token and when.
	Draining map[string]Draining
}

// Draining is one resource advanced over older writes in flight.
type Draining struct {
	Token int64
	At    time.Time
}

// RecoveryStatus says whether a local fence still waits out the writes a
// crashed predecessor may have left in flight.
type RecoveryStatus struct {
	Recovering bool
	Until      time.Time // when the last of those writes has ended
	Held       int       // resources whose writes wait for it right now
	Reason     string
}

// quietAfter: the fence records itself quiet once no write has been in
// flight for this long. A write after that costs one durable record before
// its forward; under steady traffic the count rarely stays at zero this
// long, so the record is rarely written. A crash at least this long (plus
// one log write) after the last write ended restarts with no wait.
const quietAfter = 500 * time.Millisecond

// Serving states of a local fence (quiescence.state).
const (
	stateQuiet    int32 = iota // durable: no write in flight
	stateQuieting              // a quiet record is being written
	stateBusying               // a busy record is being written
	stateBusy                  // durable: writes may be in flight
)

// quiescence keeps the store's serving record in step with the fence's
// writes in flight: busy durably before the first forward after a quiet
// record, quiet once none has been in flight for quietAfter.
type quiescence struct {
	store ServingStore
	bound time.Duration
	delay time.Duration
	log   func(msg string, args ...any)

	inflight atomic.Int64
	state    atomic.Int32

	mu      sync.Mutex
	busy    *busyMark     // the busy record being written
	quieted chan struct{} // closed when the quiet record being written returned
	timer   *time.Timer
	closed  bool // Close was called: no quiet record any more
	// marking counts draining records being written: a quiet record,
	// which forgets them, waits for none (see draining).
	marking int
	// hold, while it returns true, keeps the record busy whatever is in
	// flight (a crashed predecessor's writes are being waited out).
	hold func() bool

	marks atomic.Int64 // durable records written (tests, figures)
}

// busyMark is one busy record being written.
type busyMark struct {
	done chan struct{} // closed once it is durable, or failed
	err  error
}

// enter counts a write admitted, and returns the busy record being
// written (nil: it is durable already).
func (q *quiescence) enter() *busyMark {
	q.inflight.Add(1)
	// Sequentially consistent with quiet's store-then-load: either this
	// load sees the quiet record being written, or quiet sees this write.
	if q.state.Load() == stateBusy {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state.Load() {
	case stateBusy:
		return nil
	case stateBusying:
		return q.busy
	}
	// Quiet, or a quiet record in flight: the busy record is written
	// after it returned, so it is the one that stays.
	after := q.quieted
	if q.state.Load() != stateQuieting {
		after = nil
	}
	q.state.Store(stateBusying)
	m := &busyMark{done: make(chan struct{})}
	q.busy = m
	go func() {
		if after != nil {
			<-after
		}
		ctx, cancel := context.WithTimeout(context.Background(), fencegate.DefaultStoreTimeout)
		err := q.store.MarkServing(ctx, true, q.bound)
		cancel()
		q.marks.Add(1)
		q.mu.Lock()
		if err != nil {
			m.err = fmt.Errorf("record the gateway busy: %w", err)
			q.state.Store(stateQuiet) // the next write tries again
		} else {
			q.state.Store(stateBusy)
		}
		close(m.done)
		q.mu.Unlock()
	}()
	return m
}

// leave counts a write ended; at zero it arms the quiet record.
func (q *quiescence) leave() {
	if q.inflight.Add(-1) != 0 {
		return
	}
	q.arm()
}

// arm schedules the quiet record after q.delay (one timer, reset at every
// transition to zero: no allocation on the write path).
func (q *quiescence) arm() {
	q.timer.Reset(q.delay)
}

// quiet writes the quiet record if no write is in flight (the timer may
// fire a little early after a reset that raced it: only the record's
// timing, never its truth, depends on when).
func (q *quiescence) quiet() {
	q.mu.Lock()
	if q.closed || q.state.Load() != stateBusy || q.hold != nil && q.hold() {
		q.mu.Unlock()
		return
	}
	if q.marking > 0 {
		// A draining record is being written: the quiet record would
		// forget it (and its write may come before it). Later.
		q.mu.Unlock()
		q.arm()
		return
	}
	q.state.Store(stateQuieting)
	if q.inflight.Load() != 0 {
		q.state.Store(stateBusy)
		q.mu.Unlock()
		return
	}
	// A busy record of a write that comes now waits for this one.
	quieted := make(chan struct{})
	q.quieted = quieted
	q.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), fencegate.DefaultStoreTimeout)
	err := q.store.MarkServing(ctx, false, 0)
	cancel()
	q.marks.Add(1)
	q.mu.Lock()
	defer q.mu.Unlock()
	close(quieted)
	if q.state.Load() != stateQuieting {
		return // a write came meanwhile; its busy record follows this one
	}
	if err != nil {
		// It may have been written all the same: the next write writes
		// busy again before its forward, as after a quiet record.
		q.log("could not record the gateway quiet", "err", err)
	}
	q.state.Store(stateQuiet)
}

// draining writes a draining record (ServingStore.MarkDraining) so that
// no quiet record forgets it: one being written is waited for, and none
// starts until it is durable. An advance's writes in flight may not be
// counted yet (they count once admitted), so the count alone would not do.
func (q *quiescence) draining(ctx context.Context, resource string, token int64) error {
	q.mu.Lock()
	for q.state.Load() == stateQuieting {
		ch := q.quieted
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		q.mu.Lock()
	}
	q.marking++
	q.mu.Unlock()
	err := q.store.MarkDraining(ctx, resource, token, time.Now())
	q.mu.Lock()
	q.marking--
	q.mu.Unlock()
	return err
}

// recovery is what a local fence knows of the writes a crashed
// predecessor may have left in flight: until when each resource is at
// risk, and which tokens are safe meanwhile.
type recovery struct {
	start    time.Time
	bound    func(resource string) time.Duration
	maxBound time.Duration
	draining map[string]Draining
	// unknown: the previous run could not be read (the store was down at
	// start): every resource with a fence is treated as draining.
	unknown bool
	reason  string
	onWait  func(ctx context.Context, resource string, waited time.Duration, err error)
	onEnd   func(held int)

	mu sync.Mutex
	// crashHighest: for every resource this process advanced while
	// recovering, its highest token before (what the predecessor left).
	crashHighest map[string]int64
	held         map[string]int
	waited       int
	ended        atomic.Bool
	endTimer     *time.Timer
}

// until returns when writes of token to resource (whose highest is now
// highest, below it for a ScopeTree write) are safe from the
// predecessor's writes in flight; zero if they are now.
func (r *recovery) until(resource string, token, highest, below int64, scope Scope) time.Time {
	r.mu.Lock()
	hc, ok := r.crashHighest[resource]
	r.mu.Unlock()
	if !ok {
		hc = highest
	}
	end := r.start.Add(r.bound(resource))
	switch {
	case scope == ScopeTree && (hc > 0 || below > 0):
		// The predecessor may have had member writes in flight anywhere
		// below, through any route.
		return r.start.Add(r.maxBound)
	case hc == 0:
		// No fence when the predecessor stopped: it admitted no write.
		return time.Time{}
	case token > hc:
		// A write of hc (or older) may still be on its way.
		return end
	}
	if r.unknown {
		return end
	}
	if d, ok := r.draining[resource]; ok && d.Token >= hc {
		// Advanced to hc over older writes still in flight: they ended
		// at most a forward bound after the advance.
		if at := d.At.Add(r.bound(resource)); at.Before(end) {
			end = at
		}
		return end
	}
	// Every write the predecessor had in flight here carried hc.
	return time.Time{}
}

// advancing records resource's highest before this process's first
// advance of it while recovering, and reports whether a write of the
// predecessor may still be in flight there (it had a fence).
func (r *recovery) advancing(resource string, highest int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended.Load() {
		return false
	}
	hc, ok := r.crashHighest[resource]
	if !ok {
		r.crashHighest[resource], hc = highest, highest
	}
	return hc > 0
}

// wait sleeps until t, counted as a hold of resource.
func (r *recovery) wait(ctx context.Context, resource string, t time.Time) error {
	r.mu.Lock()
	r.held[resource]++
	r.waited++
	r.mu.Unlock()
	start := time.Now()
	err := clock.Sleep(ctx, time.Until(t))
	r.mu.Lock()
	if r.held[resource]--; r.held[resource] == 0 {
		delete(r.held, resource)
	}
	r.mu.Unlock()
	if r.onWait != nil {
		r.onWait(ctx, resource, time.Since(start), err)
	}
	return err
}

// status reports the recovery for /readyz and the console.
func (r *recovery) status() RecoveryStatus {
	if r == nil {
		return RecoveryStatus{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	until := r.start.Add(r.maxBound)
	if r.ended.Load() || !time.Now().Before(until) {
		return RecoveryStatus{}
	}
	return RecoveryStatus{Recovering: true, Until: until, Held: len(r.held), Reason: r.reason}
}

// end is called once the longest bound has passed.
func (r *recovery) end() {
	r.mu.Lock()
	r.ended.Store(true)
	r.crashHighest = nil
	n := r.waited
	r.mu.Unlock()
	if r.onEnd != nil {
		r.onEnd(n)
	}
}

// Recovery reports whether the fence still waits out writes a crashed
// predecessor may have left in flight.
func (f *LocalFence) Recovery() RecoveryStatus { return f.rec.status() }

// QuiescenceMarks reports how many serving records (busy or quiet) the
// fence has written (tests and figures).
func (f *LocalFence) QuiescenceMarks() int64 {
	if f.q == nil {
		return 0
	}
	return f.q.marks.Load()
}

// Begin reads what the previous process serving from opts.Serving left
// and records that this one serves. If the previous one crashed with
// writes possibly in flight, the fence waits them out: until then a write
// is admitted at once unless a write the predecessor had in flight could
// land after it (a newer token on a resource that had a fence, or any
// token of a fence advanced over older writes in flight), which waits at
// most its route's forward bound (RecoveryBound) from now. It returns the
// status, for the log.
func (f *LocalFence) Begin(ctx context.Context) (RecoveryStatus, error) {
	if f.q == nil {
		return RecoveryStatus{}, nil
	}
	prev, err := f.q.store.LastRun(ctx)
	unknown := err != nil
	if unknown {
		// The store is down at start (PostgreSQL): writes are refused
		// until it is back, and then wait as if the predecessor had
		// crashed with writes in flight everywhere. Its record is left as
		// it was: busy if it crashed, and this process writes busy itself
		// before its first forward.
		f.q.log("could not read what the previous run left; waiting out writes it may have left in flight on every fence", "err", err)
		prev = PreviousRun{Unclean: true}
	}
	if !prev.Unclean {
		// Stopped or quiet: the record says nothing is in flight, which is
		// so; the first write records busy.
		return RecoveryStatus{}, nil
	}
	maxBound := f.q.bound
	bound := f.recoveryBound
	if prev.Bound > maxBound {
		// The previous process had longer forwards than this one's routes
		// (its configuration differed): wait them out everywhere.
		maxBound = prev.Bound
		bound = nil
	}
	if bound == nil {
		bound = func(string) time.Duration { return maxBound }
	}
	// Busy until the predecessor's writes have ended: a crash meanwhile
	// leaves them to the next process to wait out. If it cannot be written
	// now, the record says busy still (the predecessor's) or this process
	// could not have read it; the first write writes it before its
	// forward.
	state := stateBusy
	if unknown {
		state = stateQuiet
	} else if err := f.q.store.MarkServing(ctx, true, maxBound); err != nil {
		f.q.log("could not record the gateway busy at start; its first write will", "err", err)
		state = stateQuiet
	}
	reason := "the previous process stopped with writes possibly in flight (a crash)"
	if unknown {
		reason = "what the previous process left could not be read at start (store unavailable): waiting out writes it may have left in flight"
	}
	r := &recovery{
		start: time.Now(), bound: bound, maxBound: maxBound, draining: prev.Draining, unknown: unknown,
		reason:       reason,
		onWait:       f.onRecoveryWait,
		onEnd:        f.onRecoveryEnd,
		crashHighest: map[string]int64{},
		held:         map[string]int{},
	}
	f.q.state.Store(state)
	f.q.hold = func() bool { return r.status().Recovering }
	r.endTimer = time.AfterFunc(maxBound, func() {
		r.end()
		if f.q.inflight.Load() == 0 {
			f.q.arm()
		}
	})
	f.rec = r
	return r.status(), nil
}

// Close stops the fence's timers; if no write is in flight it records a
// clean stop, so the next start waits for nothing.
func (f *LocalFence) Close(ctx context.Context) error {
	if r := f.rec; r != nil && r.endTimer != nil {
		r.endTimer.Stop()
	}
	if f.q == nil {
		return nil
	}
	f.q.mu.Lock()
	f.q.closed = true
	f.q.timer.Stop()
	f.q.mu.Unlock()
	if r := f.rec; r != nil && r.status().Recovering {
		return nil // the predecessor's writes may still be in flight: stay busy
	}
	if n := f.q.inflight.Load(); n != 0 {
		return fmt.Errorf("%d admitted writes still in flight: the next start waits them out", n)
	}
	return f.q.store.EndServing(ctx)
}
