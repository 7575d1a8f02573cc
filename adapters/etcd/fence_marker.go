package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/clock"
	"github.com/fencegate/fencegate/resource"
	"github.com/fencegate/fencegate/sharedfence"
)

// session is one lease of this replica and the markers attached to it.
type session struct {
	lease clientv3.LeaseID
	// provenUntil (monotonic nanoseconds since epoch: a step of the wall
	// clock does not stretch it) is the time measured before the last
	// renewal that succeeded plus the TTL it granted: until then the lease
	// is alive whatever happened since.
	provenUntil atomic.Int64
	// gone is lost, readable without f.mu (permit.Live).
	gone atomic.Bool
	// Guarded by f.mu.
	lost    bool
	entries map[string]*entry // by marker key
	// lostLeft counts the forwards still in flight once the session is
	// lost.
	lostLeft int
}

func (s *session) proven() bool { return mono(time.Now()) < s.provenUntil.Load() }

// epoch is the origin of mono.
var epoch = time.Now()

// mono is t on the monotonic clock, in nanoseconds since epoch.
func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }

// entry is one marker key and the writes that hold it.
type entry struct {
	key      string
	resource string
	token    int64
	count    int  // writes holding the entry (admitted, or being decided)
	held     bool // the marker was put (or may have been: a failed Txn)
	putting  bool // a put is queued or in flight
	deleting bool // a delete is queued
	// deleteSent: a delete is in flight; a write joining meanwhile puts
	// the marker again rather than count on it.
	deleteSent bool
	// unsure: the Txn that put the marker failed; it may not exist.
	unsure bool
	closed bool // the fence moved past token: no write joins any more
	// noLinger: a collection above the key was raised, and its drain
	// waits for this marker whatever its token: it is not kept idle.
	noLinger bool
	// watchGen is the fence watch's generation at the entry's last read
	// (0 if the watch was down or restarted while it ran); idleSince is
	// when its last write ended.
	watchGen  int64
	idleSince time.Time
	// ready: the record, as last read or watched since (at revision seen),
	// is at this token and ready. A write of the token then joins the held
	// marker without a read (join).
	ready bool
	seen  int64
	// readAt is when the last read of the record was sent: a join trusts
	// the watch for joinFresh after it (join).
	readAt  time.Time
	flights map[*permit]struct{}
	// rows: for a write below collections (AdmitTree), the rows of its
	// scope (rowsScope) as read at revision rowsRev in watch generation
	// rowsGen, kept only when they admit a write of the token with no wait
	// and nothing the watch saw has changed them since (join).
	rows      map[string]sharedfence.Row
	rowsScope []string
	rowsRev   int64
	rowsGen   int64
}

type opKind int

const (
	opMark   opKind = iota // (put the marker and) read the record
	opDelete               // delete an idle marker
)

type op struct {
	kind opKind
	e    *entry
	put  bool
	w    gateway.Write
	// scope: the keys whose fence and below records the Txn also reads
	// for this write (a hierarchical write's own key and the collections
	// above it, AdmitTree); none for a key alone.
	scope []string
	start time.Time
	done  chan struct{}
	s     *session

	// Results.
	m   marked
	err error
}

// marked is what mark found out for one write.
type marked struct {
	retry  bool // decide again (closedState)
	permit *permit
	exists bool
	rec    record
	rev    int64 // the record's mod revision
	// rows: the records of the op's scope, read in the Txn that read the
	// write's own record, with its marker held (AdmitTree).
	rows map[string]sharedfence.Row
}

// mark puts (or joins) this replica's marker of w.Resource at w.Token and
// reads the record, in the next marker Txn, with the fence and below
// records of scope (at the same revision: after the marker was put).
func (f *SharedFence) mark(ctx context.Context, w gateway.Write, scope []string) (marked, error) {
	s, err := f.session(ctx, w.Resource)
	if err != nil {
		return marked{}, err
	}
	key := f.markerKey(w.Resource, w.Token, s.lease)
	f.mu.Lock()
	if s.lost {
		f.mu.Unlock()
		return marked{}, fencegate.Unavailable(w.Resource, errLeaseLost)
	}
	e := s.entries[key]
	if e == nil {
		e = &entry{key: key, resource: w.Resource, token: w.Token, flights: make(map[*permit]struct{})}
		s.entries[key] = e
	}
	if e.closed {
		// The fence moved past this token, as a read through this entry
		// saw: stale without a request.
		f.mu.Unlock()
		return f.closedState(ctx, w)
	}
	e.count++
	if p := f.join(e, s, w, scope); p != nil {
		rows := e.rows
		f.mu.Unlock()
		p.Arm(f.forwardTimeout)
		if len(scope) == 0 {
			rows = nil
		}
		return marked{permit: p, rows: rows}, nil
	}
	o := &op{kind: opMark, e: e, w: w, scope: scope, start: time.Now(), done: make(chan struct{}), s: s}
	if (!e.held || e.deleteSent || e.unsure) && !e.putting {
		// No marker, or its delete is in flight: put it (again). Marker
		// Txns go out one after the other, so the put lands after the
		// delete.
		e.putting, o.put = true, true
	}
	e.deleting = false
	// A write that joins a marker already put (not being put, deleted or
	// in doubt) only reads: its Txn need not wait for a put or delete of
	// another key, nor for their commit to the log (the reads lane). One
	// whose marker is being put reads after that put, in the same Txn or a
	// later one of the writes lane.
	l := &f.writes
	if !o.put && !e.putting {
		l = &f.reads
	}
	l.queue = append(l.queue, o)
	f.mu.Unlock()
	l.kick()
	select {
	case <-o.done:
	case <-f.closing:
		return marked{}, fencegate.Unavailable(w.Resource, errClosed)
	}
	// o.done is closed only by the worker, which always finishes an op
	// it took; a write whose ctx ends meanwhile still waits the Txn out
	// (it is bounded by the store timeout), so its count stays right.
	return o.m, o.err
}

// join admits w on e without a Txn (f.mu held, e counted), or returns nil:
// the write then reads the record. It does when the marker is held (put,
// not being deleted or put again, not in doubt), the record was at w's
// token and ready when read, and the watch has run since that read without
// a restart, so every change of the record after it reached this replica
// or is on its way. One on its way is a raise by another replica (or an
// operator) past the token, and that raise's drain waits for this marker,
// which this replica deletes only once its last write has ended: a write
// joined meanwhile is ordered before the raise's write, as if it had come
// first (I1, I2). An operator's Advance waits for these markers too
// (Advance), so a token it raised past is refused everywhere once it
// returns. A key's write below collections (its scope: the key and the
// collections above it) joins only with the rows its last read found, if
// they admitted it with no wait and the watch has shown no change of them
// since: a collection raised above it drains this marker too (its tree
// drain waits for every marker below it), and a change the watch brought
// sends the next write to read. A collection's own write (ScopeTree)
// always reads.
func (f *SharedFence) join(e *entry, s *session, w gateway.Write, scope []string) *permit {
	if w.Scope != gateway.ScopeKey || !e.ready || e.closed || e.noLinger ||
		!e.held || e.putting || e.deleteSent || e.unsure || s.lost {
		return nil
	}
	gen := f.watchGen.Load()
	if gen%2 == 0 || e.watchGen != gen || time.Since(e.readAt) > joinFresh {
		return nil
	}
	if len(scope) > 0 && (e.rows == nil || e.rowsGen != gen || !slices.Equal(scope, e.rowsScope)) {
		return nil
	}
	e.deleting = false
	p := &permit{f: f, s: s, e: e, Flight: sharedfence.Flight{
		Resource: e.resource, Abort: w.Abort, BodySent: w.BodySent, Start: time.Now()}}
	e.flights[p] = struct{}{}
	f.joins.Add(1)
	return p
}

// closedState answers a write of a closed entry's token: the record read
// again (a closed entry's token is below the highest, or about to be: a
// raise of this replica is on its way; then the write tries again).
func (f *SharedFence) closedState(ctx context.Context, w gateway.Write) (marked, error) {
	st, err := f.State(ctx, w.Resource)
	if err != nil {
		return marked{}, err
	}
	if st.Highest > w.Token {
		return marked{exists: true, rec: record{Highest: st.Highest, Ready: st.Ready}}, nil
	}
	if err := clock.Sleep(ctx, 5*time.Millisecond); err != nil {
		return marked{}, err
	}
	return marked{retry: true}, nil
}

// session returns the live session, waiting up to the store timeout.
func (f *SharedFence) session(ctx context.Context, resource string) (*session, error) {
	t := time.NewTimer(f.storeTimeout)
	defer t.Stop()
	for {
		f.mu.Lock()
		s, up, lastErr := f.sess, f.up, f.lastErr
		live := s != nil && !s.lost // lost is written under f.mu (lose)
		f.mu.Unlock()
		if live {
			if !s.proven() {
				return nil, fencegate.Unavailable(resource, errors.New("the replica cannot prove its etcd lease alive (renewals are failing)"))
			}
			return s, nil
		}
		select {
		case <-up:
		case <-t.C:
			if lastErr == nil {
				lastErr = errors.New("no etcd lease yet")
			}
			return nil, fencegate.Unavailable(resource, lastErr)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.closing:
			return nil, fencegate.Unavailable(resource, errClosed)
		}
	}
}

// lane is a queue of marker ops and the Txns that carry them, one at a
// time: ops queued while one is in flight share the next. (More Txns in
// flight at once cost etcd more requests per write, and its members'
// CPU is what a busy cluster runs short of: docs/shared-fence.md.)
type lane struct {
	queue []*op // guarded by f.mu
	wake  chan struct{}
}

func (l *lane) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// runLane sends l's queued marker puts, deletes and record reads, as few
// Txns as it can. The writes lane also lets go the idle markers.
func (f *SharedFence) runLane(l *lane) {
	tick := time.NewTicker(f.idle / 2)
	defer tick.Stop()
	busy := false
	for {
		select {
		case <-f.closing:
			f.failQueue(l, errClosed)
			return
		case <-l.wake:
		case <-tick.C:
			if l == &f.writes {
				f.dropIdle(time.Now().Add(-f.idle))
			}
		}
		if busy && f.linger > 0 {
			// Under load, wait a little for more writes to share the Txn.
			deadline := time.Now().Add(f.linger)
			for time.Now().Before(deadline) {
				f.mu.Lock()
				n := len(l.queue)
				f.mu.Unlock()
				if n >= lingerMarks {
					break
				}
				time.Sleep(f.linger / 4)
			}
		}
		for {
			ops := f.take(l)
			if len(ops) == 0 {
				break
			}
			busy = len(ops) > 1
			f.send(ops)
		}
	}
}

func (f *SharedFence) failQueue(l *lane, err error) {
	f.mu.Lock()
	ops := l.queue
	l.queue = nil
	for _, o := range ops {
		if o.kind == opMark {
			f.release(o.e, o.s)
		}
		o.err = fencegate.Unavailable(o.e.resource, err)
	}
	f.mu.Unlock()
	for _, o := range ops {
		if o.done != nil {
			close(o.done)
		}
	}
}

// take removes from l's queue the ops of one Txn: at most maxOps etcd
// operations, each key put or deleted once.
func (f *SharedFence) take(l *lane) []*op {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ops []*op
	n := 0
	reads := make(map[string]bool)  // fence records read
	belows := make(map[string]bool) // below records read
	i := 0
	for ; i < len(l.queue); i++ {
		o := l.queue[i]
		cost := 0
		switch o.kind {
		case opDelete:
			if !o.e.deleting || o.e.count > 0 {
				// Joined again since: the marker stays.
				continue
			}
			cost = 1
		case opMark:
			if o.put {
				cost++
				if !belows[o.e.resource] {
					cost++ // its own below level (ownLevel)
				}
			}
			if !reads[o.e.resource] {
				cost++
			}
			for _, k := range o.scope {
				if !reads[k] && k != o.e.resource {
					cost++
				}
				if !belows[k] {
					cost++
				}
			}
		}
		if n+cost > maxOps && len(ops) > 0 {
			// (An op alone above the cap goes out alone: etcd refuses it,
			// and its write is refused, rather than wait for ever.)
			break
		}
		n += cost
		if o.kind == opMark {
			reads[o.e.resource] = true
			if o.put {
				belows[o.e.resource] = true
			}
			for _, k := range o.scope {
				reads[k], belows[k] = true, true
			}
		} else {
			o.e.deleting, o.e.deleteSent = false, true
		}
		ops = append(ops, o)
	}
	l.queue = l.queue[i:]
	return ops
}

// send runs one marker Txn and hands each op its result. Ops queued on a
// lease lost since fail; the others still go out.
func (f *SharedFence) send(ops []*op) {
	f.mu.Lock()
	s := f.sess
	live := s != nil && !s.lost
	f.mu.Unlock()
	var cur, stale []*op
	for _, o := range ops {
		if live && o.s == s {
			cur = append(cur, o)
		} else {
			stale = append(stale, o)
		}
	}
	if len(stale) > 0 {
		f.finish(stale, nil, nil, nil, 0, errLeaseLost)
	}
	if len(cur) == 0 {
		return
	}
	var then []clientv3.Op
	reads := make(map[string]int)  // resource -> index of its record's read in then
	belows := make(map[string]int) // resource -> index of its below level's read
	for _, o := range cur {
		switch {
		case o.kind == opDelete:
			then = append(then, clientv3.OpDelete(o.e.key))
		case o.put:
			then = append(then, clientv3.OpPut(o.e.key, "", clientv3.WithLease(o.s.lease)))
		}
	}
	for _, o := range cur {
		if o.kind != opMark {
			continue
		}
		if _, ok := reads[o.e.resource]; !ok {
			reads[o.e.resource] = len(then)
			then = append(then, clientv3.OpGet(f.fenceKey(o.e.resource)))
		}
		ks := o.scope
		if o.put {
			ks = append(ks[:len(ks):len(ks)], o.e.resource)
		}
		for _, k := range ks {
			if _, ok := reads[k]; !ok {
				reads[k] = len(then)
				then = append(then, clientv3.OpGet(f.fenceKey(k)))
			}
			if _, ok := belows[k]; !ok {
				belows[k] = len(then)
				then = append(then, clientv3.OpGet(f.belowKey(k)))
			}
		}
	}
	if h := testHookMarkerTxn.Load(); h != nil {
		(*h)(then)
	}
	// The watch's generation before the Txn: a watch up (odd) since then
	// started at or before the Txn's revision, so it brings every change
	// after the reads (join).
	gen := f.watchGen.Load()
	resp, err := f.markerTxn(then)
	f.finish(cur, resp, reads, belows, gen, err)
	if isLeaseGone(err) {
		f.lose(s, err)
	}
}

// finish hands the ops of one marker Txn their results: resp (with the
// index of each resource's record read in reads, and of its below level
// in belows), or err.
func (f *SharedFence) finish(ops []*op, resp *clientv3.TxnResponse, reads, belows map[string]int, gen int64, err error) {
	f.mu.Lock()
	if gen%2 == 0 || f.watchGen.Load() != gen {
		gen = 0 // down, or restarted meanwhile: it may have missed a change
	}
	var permits []*permit
	for _, o := range ops {
		e := o.e
		if o.kind == opDelete {
			e.deleteSent = false
			if err == nil {
				e.held = false
				if e.count == 0 {
					delete(o.s.entries, e.key)
				}
			} else {
				// The delete may have been applied all the same: the next
				// write of the token puts the marker again, none joins it.
				e.unsure = true
			}
			continue
		}
		if o.put {
			e.putting = false
			// A failed Txn may still have been applied: the marker is
			// deleted when its last write ends, and put again by the next
			// write that joins it (unsure).
			e.held, e.unsure = true, err != nil
		}
		if err != nil {
			if errors.Is(err, errLeaseLost) {
				o.err = fencegate.Unavailable(e.resource, err)
			} else {
				o.err = fencegate.Unavailable(e.resource, fmt.Errorf("marker: %w", err))
			}
			f.release(e, o.s)
			continue
		}
		kvs := resp.Responses[reads[e.resource]].GetResponseRange().Kvs
		if len(kvs) > 0 {
			rec, derr := decode(kvs[0])
			if derr != nil {
				o.err = fencegate.Unavailable(e.resource, derr)
				f.release(e, o.s)
				continue
			}
			o.m.exists, o.m.rec, o.m.rev = true, rec, kvs[0].ModRevision
		}
		if len(o.scope) > 0 {
			rows, derr := f.scopeRows(o.scope, resp, reads, belows)
			if derr != nil {
				o.err = fencegate.Unavailable(e.resource, derr)
				f.release(e, o.s)
				continue
			}
			o.m.rows = rows
		}
		e.watchGen = gen
		if o.m.exists && o.m.rec.Highest > e.token {
			e.closed = true
		}
		e.readAt = o.start
		if rev := resp.Header.Revision; rev >= e.seen {
			// (A watched change newer than this read is kept.)
			e.seen, e.ready = rev, o.m.exists && o.m.rec.Highest == e.token && o.m.rec.Ready
		}
		if rev := resp.Header.Revision; len(o.scope) > 0 && rev >= e.rowsRev {
			e.rows, e.rowsScope, e.rowsRev, e.rowsGen = nil, nil, rev, gen
			if o.w.Scope == gateway.ScopeKey && o.scope[0] == e.resource {
				if acts, ref := sharedfence.Decide(o.w, o.scope[1:], o.m.rows); ref == nil && len(acts) == 0 {
					e.rows, e.rowsScope = o.m.rows, o.scope
				}
			}
		}
		if drainingRow(o.m.rows) || o.put && ownLevelRaised(resp, belows[e.resource]) {
			// A tree or below drain is under way, which may have raised
			// before this replica's watch let go what it held, and read
			// the markers after this one was put: it waits for this one
			// whatever its token, so it must not linger idle.
			e.noLinger = true
		}
		if e.unsure {
			// Joined while the put that failed was in flight: no proof the
			// marker exists.
			o.err = fencegate.Unavailable(e.resource, errors.New("marker: the put of this replica's marker failed"))
			f.release(e, o.s)
			continue
		}
		if !o.s.lost && o.m.exists && o.m.rec.Highest == e.token && o.m.rec.Ready {
			p := &permit{f: f, s: o.s, e: e, Flight: sharedfence.Flight{
				Resource: e.resource, Abort: o.w.Abort, BodySent: o.w.BodySent, Start: o.start}}
			e.flights[p] = struct{}{}
			o.m.permit = p
			permits = append(permits, p)
			continue
		}
		f.release(e, o.s)
	}
	f.mu.Unlock()
	for _, p := range permits {
		// The forward must end within the forward timeout counted from
		// before the marker was read: a drain that finds this replica gone
		// waits that long (docs/design.md §4).
		p.Arm(f.forwardTimeout)
	}
	for _, o := range ops {
		if o.done != nil {
			close(o.done)
		}
	}
}

// markerTxn runs a marker Txn. It requires a leader: a member that lost
// its leader (the leader died, an election runs) refuses it at once, before
// proposing anything, so it is sent again until the store timeout instead
// of waiting that long for a proposal that cannot commit.
//
// A marker Txn is idempotent (puts of one empty value on this replica's
// lease, deletes, reads), so an attempt whose outcome is unknown is sent
// again too, each attempt bounded by a quarter of the store timeout: a
// proposal forwarded to a leader that just died is lost without an answer,
// and waiting the whole store timeout for it would stall every write of
// the replica that long after each leader change.
func (f *SharedFence) markerTxn(then []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(f.ctx), f.storeTimeout)
	defer cancel()
	attempt := max(f.storeTimeout/4, 250*time.Millisecond)
	for {
		actx, acancel := context.WithTimeout(ctx, attempt)
		f.requests.Add(1)
		resp, err := f.client.Txn(actx).Then(then...).Commit()
		acancel()
		if err == nil || !isNoLeader(err) && !errors.Is(err, context.DeadlineExceeded) && actx.Err() == nil {
			return resp, err
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if serr := clock.Sleep(ctx, 25*time.Millisecond); serr != nil {
			return nil, err
		}
	}
}

// isNoLeader reports whether err is etcd's refusal of a request that needs
// a leader by a member that has none: nothing was proposed.
func isNoLeader(err error) bool {
	return errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader) ||
		strings.Contains(err.Error(), rpctypes.ErrNoLeader.Error())
}

var errLeaseLost = errors.New("the replica's etcd lease was lost")

// testHookMarkerTxn, if set (tests only), is called with each marker Txn's
// operations before it is sent.
var testHookMarkerTxn atomic.Pointer[func(then []clientv3.Op)]

// testHookWatched, if set (tests only), is called with each event of the
// fence watch before it is handled: a test holds it to play a watch that
// lags.
var testHookWatched atomic.Pointer[func(ev *clientv3.Event)]

// drainingRow reports whether a row of a marker Txn's scope shows a drain
// not done: a record or a below level not ready.
func drainingRow(rows map[string]sharedfence.Row) bool {
	for _, r := range rows {
		if !r.Ready || !r.BelowReady {
			return true
		}
	}
	return false
}

// ownLevelRaised reports whether the below level read at i (a put marker's
// own key's, read even without a scope) is raised and not ready: a member
// write's below drain waits for the marker.
func ownLevelRaised(resp *clientv3.TxnResponse, i int) bool {
	l, _, err := decodeLevel(first(resp.Responses[i].GetResponseRange().Kvs))
	return err != nil || !l.Ready
}

// release ends one write's hold on e (f.mu held). The last one leaves the
// marker idle, or queues its delete if it must not linger.
func (f *SharedFence) release(e *entry, s *session) {
	e.count--
	if e.count > 0 {
		return
	}
	e.idleSince = time.Now()
	if s.lost {
		delete(s.entries, e.key)
		return
	}
	if !e.held && !e.putting {
		delete(s.entries, e.key)
		return
	}
	if e.closed || e.noLinger || e.watchGen%2 == 0 || e.watchGen != f.watchGen.Load() {
		f.queueDelete(e, s)
	}
}

func (f *SharedFence) queueDelete(e *entry, s *session) {
	if e.deleting || e.deleteSent || e.count > 0 {
		// Queued, or on its way (a marker Txn, or a raise's).
		return
	}
	e.deleting = true
	f.writes.queue = append(f.writes.queue, &op{kind: opDelete, e: e, s: s})
	f.writes.kick()
}

// closeEntries runs close on each of the session's markers (by key) and
// deletes those that close says go and no write holds; nothing without a
// session.
func (f *SharedFence) closeEntries(close func(key string, e *entry) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sess
	if s == nil {
		return
	}
	for k, e := range s.entries {
		if close(k, e) && e.count == 0 && e.held {
			f.queueDelete(e, s)
		}
	}
}

// dropIdle deletes the markers idle since before cutoff.
func (f *SharedFence) dropIdle(cutoff time.Time) {
	f.closeEntries(func(_ string, e *entry) bool { return e.idleSince.Before(cutoff) })
}

// superseded closes this replica's markers of resource below highest: no
// write joins them, and an idle one is deleted at once so the drain of
// highest does not wait for it.
func (f *SharedFence) superseded(resource string, highest int64) {
	dir := f.markerDir(resource)
	f.closeEntries(func(k string, e *entry) bool {
		if strings.HasPrefix(k, dir) && e.token < highest {
			e.closed = true
			return true
		}
		return false
	})
}

// changed drops the rows kept for join that include key k, read before
// revision rev (a change of k's record or below level, or a delete); a
// delete of k's own record (never made: no write joins then) leaves its
// markers not ready.
func (f *SharedFence) changed(k string, rev int64, deleted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sess
	if s == nil {
		return
	}
	for _, e := range s.entries {
		if e.rows != nil && rev > e.rowsRev && slices.Contains(e.rowsScope, k) {
			e.rows, e.rowsScope = nil, nil
		}
		if deleted && e.resource == k && rev > e.seen {
			e.seen, e.ready = rev, false
		}
	}
}

// observed is superseded for a change of resource's record the watch saw
// (at revision rev); it also keeps the markers' view of the record for
// join.
func (f *SharedFence) observed(resource string, rec record, rev int64) {
	dir := f.markerDir(resource)
	f.closeEntries(func(k string, e *entry) bool {
		if !strings.HasPrefix(k, dir) {
			return false
		}
		if rev > e.seen {
			e.seen, e.ready = rev, rec.Highest == e.token && rec.Ready
		}
		if e.token < rec.Highest {
			e.closed = true
			return true
		}
		return false
	})
}

// letGoBelow lets go this replica's markers of the keys below coll as
// soon as no write holds them (at once if none does): a collection's
// drain waits for them whatever their token (docs/design.md §4). Liveness
// only: an idle marker not let go is deleted within markerIdle.
func (f *SharedFence) letGoBelow(coll string) {
	members := resource.MemberPrefix(coll)
	f.letGo(func(res string) bool { return strings.HasPrefix(res, members) })
}

// letGo lets go, as letGoBelow, this replica's markers of the keys that
// match.
func (f *SharedFence) letGo(match func(resource string) bool) {
	f.closeEntries(func(_ string, e *entry) bool {
		if match(e.resource) {
			e.noLinger = true
			return true
		}
		return false
	})
}

// takeOlderIdle closes this replica's markers of resource below token (an
// advance to token is about to be raised) and returns those no write
// holds, for the raise's Txn to delete, with their session.
func (f *SharedFence) takeOlderIdle(resource string, token int64) (*session, []*entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sess
	if s == nil {
		return nil, nil
	}
	dir := f.markerDir(resource)
	var idle []*entry
	for k, e := range s.entries {
		if !strings.HasPrefix(k, dir) || e.token >= token || e.closed {
			continue
		}
		if e.count == 0 && e.held && !e.putting && !e.deleteSent {
			// Closed while its delete is on its way: a write of its token
			// waits for the raise (closedState) rather than join it.
			// Its delete, if queued, is the raise's now: a second one
			// could go out with a new marker's put of the key.
			e.closed, e.deleteSent, e.deleting = true, true, false
			idle = append(idle, e)
		}
	}
	return s, idle
}

// olderDeleted records the outcome of the deletes takeOlderIdle handed
// out: applied, or left to the marker Txns.
// applied: the raise's Txn ran them; failed: its outcome is unknown (the
// markers may or may not be gone, and the fence may not have moved);
// neither: the raise found the fence at or past its token already.
func (f *SharedFence) olderDeleted(s *session, idle []*entry, applied, failed bool) {
	if len(idle) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range idle {
		e.deleteSent = false
		switch {
		case applied:
			e.held = false
			if e.count == 0 {
				delete(s.entries, e.key)
			}
		case failed:
			// Open again, and put again by the next write that joins.
			e.closed, e.unsure = false, true
			fallthrough
		case !s.lost:
			f.queueDelete(e, s)
		}
	}
}

// permit is a write in flight: it holds its entry's marker.
type permit struct {
	f *SharedFence
	s *session
	e *entry
	// Flight bounds the write's forward from before its marker Txn.
	sharedfence.Flight
	once sync.Once
}

var _ gateway.LivePermit = (*permit)(nil)

// Live implements gateway.LivePermit: the write may send on only while its
// lease is proven alive and within the forward timeout since its marker
// was read. Memory only.
func (p *permit) Live() error {
	if p.s.gone.Load() || !p.s.proven() {
		return &fencegate.SessionLostError{Resource: p.Resource, Err: errors.New("the replica cannot prove its etcd lease alive")}
	}
	return p.Flight.Live(p.f.forwardTimeout)
}

// Release implements gateway.Permit. It does no I/O: the marker lingers,
// or its delete goes out with the next marker Txn.
func (p *permit) Release() {
	p.once.Do(func() {
		p.Stop()
		f := p.f
		f.mu.Lock()
		delete(p.e.flights, p)
		if p.s.lost {
			p.s.lostLeft--
		}
		f.release(p.e, p.s)
		f.mu.Unlock()
	})
}

// lose ends session s: its lease expired or cannot be proven alive. Its
// markers are gone (or will be when the lease expires), so its writes in
// flight are aborted; drains of other replicas wait their forward timeout.
func (f *SharedFence) lose(s *session, err error) {
	f.mu.Lock()
	if s.lost {
		f.mu.Unlock()
		return
	}
	s.lost = true
	s.gone.Store(true)
	if f.sess == s {
		f.sess = nil
		f.up = make(chan struct{})
		f.lastErr = err
	}
	var aborts []*permit
	for _, e := range s.entries {
		for p := range e.flights {
			s.lostLeft++
			aborts = append(aborts, p)
		}
	}
	n := s.lostLeft
	f.mu.Unlock()
	f.log.Warn("etcd shared fence: the replica's lease is lost; aborting its writes in flight", "lease", lease16(s.lease), "writes", n, "err", err)
	for _, p := range aborts {
		p.Lost(fmt.Errorf("the replica's etcd lease: %w", err))
	}
	// Let the lease go at once if it still exists: its markers vanish and
	// drains elsewhere start the forward-timeout wait now, not at expiry.
	ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
	f.requests.Add(1)
	f.client.Revoke(ctx, s.lease)
	cancel()
}

// runLease grants the replica's lease, registers the replica, renews the
// lease and watches that it stays provable; it starts a new one when it is
// lost.
func (f *SharedFence) runLease() {
	backoff := 100 * time.Millisecond
	for {
		s, err := f.grant()
		if err != nil {
			f.mu.Lock()
			f.lastErr = err
			f.mu.Unlock()
			select {
			case <-f.closing:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 500*time.Millisecond) // the cluster's return costs at most this
			continue
		}
		backoff = 100 * time.Millisecond
		f.mu.Lock()
		f.sess, f.lastErr = s, nil
		close(f.up)
		f.mu.Unlock()
		if done := f.keepAlive(s); done {
			return
		}
	}
}

// grant takes a new lease and registers it: the registration (no lease)
// tells drains that markers on this lease exist, the liveness key (on the
// lease) that it is alive.
func (f *SharedFence) grant() (*session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
	defer cancel()
	before := time.Now()
	f.requests.Add(1)
	g, err := f.client.Grant(ctx, int64(f.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant the replica's etcd lease: %w", err)
	}
	reg, _ := json.Marshal(registration{Replica: f.replica, ForwardTimeout: f.forwardTimeout.Milliseconds()})
	f.requests.Add(1)
	if _, err := f.client.Txn(ctx).Then(
		clientv3.OpPut(f.replicaKey(g.ID), string(reg)),
		clientv3.OpPut(f.aliveKey(g.ID), f.replica, clientv3.WithLease(g.ID)),
	).Commit(); err != nil {
		f.client.Revoke(ctx, g.ID)
		return nil, fmt.Errorf("register the replica: %w", err)
	}
	s := &session{lease: g.ID, entries: make(map[string]*entry)}
	s.provenUntil.Store(mono(before.Add(time.Duration(g.TTL) * time.Second)))
	return s, nil
}

// keepAlive renews s until it is lost (false) or the fence closes (true).
// Each renewal proves the lease until the time measured before it was
// sent plus the TTL granted; past that, the session is lost, whatever the
// renewals say later.
func (f *SharedFence) keepAlive(s *session) bool {
	every := max(f.ttl/4, 250*time.Millisecond)
	renew := time.NewTimer(0)
	defer renew.Stop()
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	type result struct {
		until time.Time
		err   error
	}
	results := make(chan result, 1)
	pending := false
	for {
		select {
		case <-f.closing:
			return true
		case <-check.C:
			if !s.proven() {
				f.lose(s, errors.New("its renewals did not succeed within the lease TTL"))
				return false
			}
		case <-renew.C:
			if pending {
				renew.Reset(every)
				continue
			}
			pending = true
			go func() {
				// A renewal lost with a dying leader must not hold the next
				// one back for long: the lease's proof runs out meanwhile.
				ctx, cancel := context.WithTimeout(context.Background(), min(f.storeTimeout, max(f.ttl/4, 250*time.Millisecond)))
				defer cancel()
				before := time.Now()
				f.requests.Add(1)
				r, err := f.client.KeepAliveOnce(ctx, s.lease)
				if err == nil && r.TTL <= 0 {
					err = errors.New("lease not found")
				}
				var until time.Time
				if err == nil {
					until = before.Add(time.Duration(r.TTL) * time.Second)
				}
				results <- result{until, err}
			}()
		case r := <-results:
			pending = false
			switch {
			case r.err == nil:
				if !s.proven() {
					// Renewed, but only after it could no longer be proven:
					// the writes were aborted already (check above) or are
					// about to be. Stay lost.
					f.lose(s, errors.New("its renewals did not succeed within the lease TTL"))
					return false
				}
				if u := mono(r.until); u > s.provenUntil.Load() {
					s.provenUntil.Store(u)
				}
				renew.Reset(every)
			case isLeaseGone(r.err) || strings.Contains(r.err.Error(), "lease not found"):
				f.lose(s, r.err)
				return false
			default:
				renew.Reset(250 * time.Millisecond)
			}
		}
	}
}

// runWatch follows every fence record and below level: it closes this
// replica's markers of tokens a record was raised past, and lets go the
// idle markers a drain waits for whatever their token (those below a
// raised or new record: a collection's tree drain; those of a collection
// whose below level was raised: a member's below drain).
func (f *SharedFence) runWatch() {
	fdir, bdir := f.prefix+"/f/", f.prefix+"/b/"
	for {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(f.ctx))
		f.requests.Add(1)
		// One watch over [P/b/, P/f/…]: the below levels, the dead keys
		// (ignored) and the records.
		wch := f.client.Watch(ctx, bdir, clientv3.WithRange(clientv3.GetPrefixRangeEnd(fdir)),
			clientv3.WithCreatedNotify())
		up := false
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				break
			}
			if resp.Created && !up {
				// Up (odd): a raise after this is seen. Nothing idle of the
				// last generation stays.
				up = true
				f.watchGen.Add(1)
			}
			for _, ev := range resp.Events {
				if h := testHookWatched.Load(); h != nil {
					(*h)(ev)
				}
				f.watched(ev, fdir, bdir)
			}
		}
		cancel()
		if up {
			f.watchGen.Add(1) // down (even)
		}
		f.dropIdle(time.Now())
		select {
		case <-f.closing:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watched handles one put or delete the watch saw.
func (f *SharedFence) watched(ev *clientv3.Event, fdir, bdir string) {
	key := string(ev.Kv.Key)
	var k string
	switch {
	case strings.HasPrefix(key, fdir):
		k = strings.TrimPrefix(key, fdir)
	case strings.HasPrefix(key, bdir):
		k = strings.TrimPrefix(key, bdir)
	default:
		return // a dead key or an ETag record
	}
	f.changed(k, ev.Kv.ModRevision, ev.Type == clientv3.EventTypeDelete)
	if ev.Type == clientv3.EventTypeDelete {
		// A below level forgotten by a reset (records are never deleted):
		// changed is all there is to it.
		return
	}
	switch {
	case strings.HasPrefix(key, fdir):
		rec, err := decode(ev.Kv)
		if err != nil {
			// Unreadable: no write joins on it (a read refuses it,
			// fence_unavailable), as after a delete.
			f.changed(k, ev.Kv.ModRevision, true)
			return
		}
		res := strings.TrimPrefix(key, fdir)
		f.observed(res, rec, ev.Kv.ModRevision)
		if !rec.Ready || ev.IsCreate() {
			// Raised (or new): its drain, if it is a collection's, waits
			// for every marker below it.
			f.letGoBelow(res)
		}
	case strings.HasPrefix(key, bdir):
		l, _, err := decodeLevel(ev.Kv)
		if err != nil || l.Ready {
			return
		}
		// Raised by a member write, which waits for every marker of the
		// collection's own key.
		coll := strings.TrimPrefix(key, bdir)
		f.letGo(func(res string) bool { return res == coll })
	}
}

// InFlight counts this replica's writes admitted to resource and still in
// flight (console.InFlightCounter). Memory only.
func (f *SharedFence) InFlight(resource string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sess
	if s == nil {
		return 0
	}
	n := 0
	for _, e := range s.entries {
		if e.resource == resource {
			n += len(e.flights)
		}
	}
	return n
}
