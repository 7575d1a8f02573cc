package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/clock"
	"github.com/fencegate/fencegate/resource"
	"github.com/fencegate/fencegate/sharedfence"
)

// SharedFence is the fence of several gateway replicas over one etcd
// cluster (fence mode "shared" with store.etcd). The protocol is the one of
// the PostgreSQL shared fence (docs/design.md §4) on etcd's primitives:
//
//   - Fence record: the key P/f/R holds R's highest token and its ready
//     flag. An advance is a compare-and-raise: a Txn that puts the new
//     highest only if the key's mod revision is the one read, so two
//     replicas cannot both raise from the same state.
//   - In-flight marker: the key P/m/R\0T\0L, for token T, attached to this
//     replica's one etcd lease L (never a lease per write). One key per
//     resource, token and replica, counted in memory: concurrent writes of
//     T here share it. The marker is put and the fence record read in one
//     Txn, so both happen at one revision: either the read sees an advance
//     (the write is refused), or the marker existed before the advance's
//     revision and the drain waits for it.
//   - Drain (token T == highest, not ready): waits (Watch) until no marker
//     of a token below T is left under P/m/R\0, then sets ready with a
//     compare on the record's mod revision. The marker key carries its
//     token, so the keys to wait for are one key range.
//   - Markers that vanished with their lease: the replica registers itself
//     (P/r/L, no lease) and keeps a liveness key (P/a/L) on the same lease
//     as its markers. A drain that finds a registered replica without its
//     liveness key knows its lease expired with its markers, so writes it
//     had in flight may still land: it swaps the registration for a key
//     P/d/L on a new lease whose TTL is the replica's forward timeout, and
//     no drain sets ready while such a key exists (the wait of PostgreSQL's
//     dead_at, timed by etcd's leader).
//   - The replica bounds each forward by the forward timeout counted from
//     before its marker Txn was sent, and aborts its forwards
//     (fencegate.SessionLostError) as soon as it cannot prove its lease
//     alive: the lease is renewed by hand, and proven until the time
//     measured before the renewal that succeeded plus the TTL granted.
//
// Hierarchical keys (gateway.TreeFence) follow the shared rules
// (sharedfence.AdmitTree) with a below level per collection, P/b/C
// (fence_tree.go).
//
// Markers of finished writes linger (markerIdle) so a repeated token costs
// no request of its own; marker puts, deletes and record reads of
// concurrent writes go out in one Txn (markerLinger). Every replica
// watches P/f/ and P/b/ and lets its idle markers go when a drain waits for
// them (an older token's when a record is raised, those below a raised
// collection, a collection's own when its below level is raised), so a
// drain does not wait out markerIdle. A key's write that joins a marker
// already put, whose record was read (or watched) at its token and ready,
// sends nothing (join); other writes that join a held marker read the
// record in read-only Txns of their own, so they wait neither for a put of
// another marker nor for its commit to etcd's log.
type SharedFence struct {
	*Store
	ttl            time.Duration
	drainTimeout   time.Duration
	forwardTimeout time.Duration
	verify         func(ctx context.Context, resource string, token int64) error
	log            *slog.Logger
	replica        string
	linger         time.Duration
	idle           time.Duration
	noMarkers      bool

	mu      sync.Mutex
	sess    *session // nil while a lease is being granted
	up      chan struct{}
	lastErr error
	// writes carries the marker puts and deletes (a put lands after the
	// delete of the same key sent before it), with the reads of the writes
	// that wait for a put; reads carries the reads of writes that join a
	// marker already put. Each sends one Txn at a time, the two at once
	// (fence_marker.go, lane).
	writes, reads lane
	// held: resources whose drain waits for a lost replica's forward
	// timeout, and until when (Recovery).
	held map[string]time.Time
	// watchGen counts the fence watch's ups and downs: odd while up. An
	// idle marker is kept only within one up generation.
	watchGen atomic.Int64
	// joins counts the writes admitted without a request (join).
	joins atomic.Int64

	closing   chan struct{}
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// SharedFenceOptions configure NewSharedFence. Zero values pick defaults.
type SharedFenceOptions struct {
	// LeaseTTL of the replica's lease. Default 10s.
	LeaseTTL time.Duration
	// DrainTimeout: as postgres.SharedFenceOptions. Default 31s.
	DrainTimeout time.Duration
	// ForwardTimeout is the longest forward of any route: a write is
	// aborted when it has passed since its marker was read, and a drain
	// that finds this replica's lease gone waits that long. Default 30s.
	ForwardTimeout time.Duration
	// Verify, if set, is consulted before a write's token advances the
	// fence (never on the repeated-token path).
	Verify func(ctx context.Context, resource string, token int64) error
	// Replica names this replica in its registration. Default hostname/pid.
	Replica string
	// MarkerLinger is how long a marker Txn waits for more writes to
	// share it while writes are queued behind one in flight. Default 1ms;
	// negative: none.
	MarkerLinger time.Duration
	// MarkerIdle is how long a marker no write holds is kept. Default 1s.
	MarkerIdle time.Duration
	// NoMarkers: this process admits no write (a coordinator alone); it
	// takes no lease.
	NoMarkers bool
	// Logger receives warnings. Nil: slog.Default().
	Logger *slog.Logger
}

var _ gateway.Fence = (*SharedFence)(nil)

const (
	markerLinger = time.Millisecond
	// markerIdle: a marker no write has held for this long is deleted.
	// The drains let idle markers go through the watch, not on this time
	// (runWatch), so it is what a resource's next write on this replica
	// saves a put for: at 1s, 1,000 resources over two replicas at 4,000
	// writes/s re-put one marker in seven writes; at 10s none. 10s was
	// measured side by side and bought no throughput (the machine was
	// CPU-bound), while it costs a key on the replica's lease and an entry
	// (about 300 bytes) per resource written in the last 10s, a fence
	// reset that waits for a marker above its value to idle out (idleGone),
	// and advances
	// through another replica that waited longer (docs/shared-fence.md,
	// "Cost per write"); so 1s stays.
	markerIdle = time.Second
	// maxOps caps the operations of one Txn (etcd's --max-txn-ops
	// defaults to 128).
	maxOps = 120
	// lingerMarks: a lingering Txn goes out once this many writes share it.
	lingerMarks = 16
	// joinFresh bounds how long a marker's writes join on its last read
	// and the watch alone before one of them reads again: a watch stalled
	// without an error (its member alive, its stream stuck) would
	// otherwise let writes of an older token join for ever, and a newer
	// token's drain wait for them until its drain timeout. At most one
	// read per lingering marker per 5 s.
	joinFresh = 5 * time.Second
)

var (
	errClosed    = errors.New("the shared fence is closed")
	errNoMarkers = errors.New("this process runs no gateway (no marker lease)")
	errNUL       = errors.New("a resource key with a NUL byte cannot be fenced on store.etcd")
)

// NewSharedFence returns the shared fence over st. It grants its lease in
// the background; until it holds one, writes are refused with
// fence_unavailable. Close ends it (the store stays open).
func NewSharedFence(st *Store, opts SharedFenceOptions) *SharedFence {
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = fencegate.DefaultDrainTimeout
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = fencegate.DefaultUpstreamTimeout
	}
	if opts.MarkerLinger == 0 {
		opts.MarkerLinger = markerLinger
	}
	if opts.MarkerIdle <= 0 {
		opts.MarkerIdle = markerIdle
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Replica == "" {
		h, _ := os.Hostname()
		opts.Replica = h + "/" + strconv.Itoa(os.Getpid())
	}
	f := &SharedFence{
		Store:          st,
		ttl:            opts.LeaseTTL,
		drainTimeout:   opts.DrainTimeout,
		forwardTimeout: opts.ForwardTimeout,
		verify:         opts.Verify,
		log:            opts.Logger,
		replica:        opts.Replica,
		linger:         max(opts.MarkerLinger, 0),
		idle:           opts.MarkerIdle,
		noMarkers:      opts.NoMarkers,
		up:             make(chan struct{}),
		writes:         lane{wake: make(chan struct{}, 1)},
		reads:          lane{wake: make(chan struct{}, 1)},
		closing:        make(chan struct{}),
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if !f.noMarkers {
		f.wg.Go(f.runLease)
		f.wg.Go(f.runWatch)
		f.wg.Go(func() { f.runLane(&f.writes) })
		f.wg.Go(func() { f.runLane(&f.reads) })
	}
	return f
}

// Lease returns this replica's current lease (0 while it holds none).
func (f *SharedFence) Lease() clientv3.LeaseID {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sess == nil {
		return 0
	}
	return f.sess.lease
}

// Ready waits until the fence holds a lease, or ctx ends.
func (f *SharedFence) Ready(ctx context.Context) error {
	if f.noMarkers {
		return nil
	}
	f.mu.Lock()
	up, err := f.up, f.lastErr
	f.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		if err != nil {
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		}
		return ctx.Err()
	}
}

// Close ends the fence. A replica with no write in flight unregisters and
// revokes its lease, so drains need not wait for it; one with writes in
// flight is left to be found gone (its writes may still land).
func (f *SharedFence) Close() error {
	f.closeOnce.Do(func() {
		close(f.closing)
		f.cancel()
		f.wg.Wait()
		f.mu.Lock()
		s := f.sess
		f.sess = nil
		inflight := 0
		if s != nil {
			s.lost = true
			for _, e := range s.entries {
				inflight += len(e.flights)
			}
		}
		f.mu.Unlock()
		if s == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
		defer cancel()
		if inflight == 0 {
			f.requests.Add(1)
			if _, err := f.client.Txn(ctx).Then(clientv3.OpDelete(f.replicaKey(s.lease))).Commit(); err != nil {
				f.log.Warn("etcd shared fence: unregister replica", "err", err)
			}
		}
		f.requests.Add(1)
		f.client.Revoke(ctx, s.lease)
	})
	return nil
}

// registration is the value of a replica key.
type registration struct {
	Replica        string `json:"replica"`
	ForwardTimeout int64  `json:"forward_timeout_ms"`
}

// Admit implements gateway.Fence. A ScopeTree write is AdmitTree's with
// no key above it; a ScopeMember admission is decided only with the
// member's own marker held (AdmitTree), never alone.
func (f *SharedFence) Admit(ctx context.Context, w gateway.Write) (gateway.Permit, error) {
	switch w.Scope {
	case gateway.ScopeTree:
		return f.AdmitTree(ctx, w, nil)
	case gateway.ScopeMember:
		return nil, fencegate.Unavailable(w.Resource, sharedfence.ErrMemberAlone)
	}
	if err := f.admissible(w); err != nil {
		return nil, err
	}
	deadline, drain := sharedfence.DrainDeadline(w, f.drainTimeout)
	p, _, err := f.admitKey(ctx, w, nil, deadline, drain)
	return p, err
}

// admissible refuses the writes this fence cannot decide at all.
func (f *SharedFence) admissible(w gateway.Write) error {
	if strings.Contains(w.Resource, "\x00") {
		return fencegate.Unavailable(w.Resource, errNUL)
	}
	if f.noMarkers {
		return fencegate.Unavailable(w.Resource, errNoMarkers)
	}
	return nil
}

// admitKey admits w on its own key; a ScopeTree write's advance and drain
// also wait for its members (treeDrain). The marker's Txn also reads the
// records of scope, returned with the permit (AdmitTree decides on them).
func (f *SharedFence) admitKey(ctx context.Context, w gateway.Write, scope []string, deadline time.Time, drain time.Duration) (gateway.Permit, map[string]sharedfence.Row, error) {
	verified := w.Verified
	for {
		m, err := f.mark(ctx, w, scope)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case m.retry:
			if time.Now().After(deadline) {
				return nil, nil, sharedfence.Draining(w, drain, nil)
			}
		case m.permit != nil:
			return m.permit, m.rows, nil
		case m.exists && w.Token < m.rec.Highest:
			return nil, nil, fencegate.StaleError(w.Resource, w.Token, m.rec.Highest)
		case !m.exists || w.Token > m.rec.Highest:
			if f.verify != nil && !verified {
				if err := f.checkIssued(ctx, w.Resource, w.Token); err != nil {
					return nil, nil, err
				}
				verified = true
			}
			if w.Scope == gateway.ScopeTree {
				if err := f.treeDrain(ctx, w, w.Resource, w.Token, true, deadline, drain); err != nil {
					return nil, nil, err
				}
				continue
			}
			// This replica's idle markers of older tokens are deleted, and
			// the drain's first read made, in the raise's Txn.
			s, idle := f.takeOlderIdle(w.Resource, w.Token)
			extra := make([]clientv3.Op, 0, len(idle)+5)
			for _, e := range idle {
				extra = append(extra, clientv3.OpDelete(e.key))
			}
			rec, raised, err := f.raise(ctx, w.Resource, w.Token, w.Owner, m.exists, m.rev, append(extra, f.drainReads(w)...)...)
			f.olderDeleted(s, idle, err == nil && raised != nil, err != nil)
			if err != nil {
				return nil, nil, err
			}
			if raised != nil {
				f.superseded(w.Resource, w.Token)
				raised.Responses = raised.Responses[len(idle):] // the drain's read after the put
			}
			if raised == nil || rec.Ready {
				continue // raced with another raise, or a new record: decide again
			}
			if err := f.drain(ctx, w, raised, deadline, drain); err != nil {
				return nil, nil, err
			}
		case !m.rec.Ready:
			if w.Scope == gateway.ScopeTree {
				err = f.treeDrain(ctx, w, w.Resource, w.Token, false, deadline, drain)
			} else {
				err = f.drain(ctx, w, nil, deadline, drain)
			}
			if err != nil {
				return nil, nil, err
			}
		default:
			// Ready at this token but the marker could not be used (its
			// lease was lost meanwhile): try again shortly.
			if time.Now().After(deadline) {
				return nil, nil, sharedfence.Draining(w, drain, nil)
			}
			if err := clock.Sleep(ctx, 5*time.Millisecond); err != nil {
				return nil, nil, err
			}
		}
	}
}

func (f *SharedFence) checkIssued(ctx context.Context, resource string, token int64) error {
	vctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	return fencegate.Unverified(resource, token, f.verify(vctx, resource, token))
}

// drain waits until no marker of a token below w.Token is left on
// w.Resource and no replica that died holding markers may still have a
// forward in flight, then sets the record ready (if it is still at
// w.Token). It returns nil also when the record moved on: the caller
// decides again.
func (f *SharedFence) drain(ctx context.Context, w gateway.Write, raised *clientv3.TxnResponse, deadline time.Time, drain time.Duration) error {
	key := f.fenceKey(w.Resource)
	dir := f.markerDir(w.Resource)
	older := dir + pad(w.Token) // markers of tokens below w.Token sort before it
	for {
		if time.Until(deadline) <= 0 {
			return sharedfence.Draining(w, drain, nil)
		}
		resp := raised // the raise's Txn read first: its Responses[1:]
		first := 1
		if resp == nil {
			rctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
			f.requests.Add(1)
			var err error
			resp, err = f.client.Txn(rctx).Then(f.drainReads(w)...).Commit()
			cancel()
			if err != nil {
				return fencegate.Unavailable(w.Resource, fmt.Errorf("drain: %w", err))
			}
			first = 0
		}
		raised = nil
		rs := resp.Responses[first:]
		fk := rs[0].GetResponseRange().Kvs
		if len(fk) == 0 {
			return fencegate.Unavailable(w.Resource, errors.New("drain: the fence record is gone"))
		}
		rec, err := decode(fk[0])
		if err != nil {
			return fencegate.Unavailable(w.Resource, err)
		}
		if rec.Highest != w.Token || rec.Ready {
			return nil
		}
		if markers := rs[1].GetResponseRange().Kvs; len(markers) > 0 {
			if err := f.awaitGone(ctx, w, dir, older, resp.Header.Revision, deadline, drain); err != nil {
				return err
			}
			continue
		}
		waited, err := f.waitDead(ctx, w, rs[2:5], deadline, drain)
		if err != nil {
			return err
		}
		if waited {
			continue
		}
		if err := f.setReady(ctx, key, rec, fk[0].ModRevision); err != nil {
			return fencegate.Unavailable(w.Resource, err)
		}
		return nil // decided again by the caller, whichever way the compare went
	}
}

// setReady records rec (at key, read at modRev) ready, unless it changed
// since: the caller decides again, whichever way the compare went.
func (f *SharedFence) setReady(ctx context.Context, key string, rec record, modRev int64) error {
	rec.Ready = true
	rec.Updated = time.Now().UnixMilli()
	if _, err := f.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)},
		clientv3.OpPut(key, rec.encode())); err != nil {
		return fmt.Errorf("drain: set ready: %w", err)
	}
	return nil
}

// drainReads are the reads of one drain round, in one Txn: w's record, the
// markers of older tokens on it, and the replicas' registrations,
// liveness and dead keys (replicaReads).
func (f *SharedFence) drainReads(w gateway.Write) []clientv3.Op {
	dir := f.markerDir(w.Resource)
	return append([]clientv3.Op{
		clientv3.OpGet(f.fenceKey(w.Resource)),
		clientv3.OpGet(dir, clientv3.WithRange(dir+pad(w.Token)), clientv3.WithKeysOnly()),
	}, f.replicaReads()...)
}

// replicaReads read the replicas' registrations, liveness and dead keys,
// for waitDead.
func (f *SharedFence) replicaReads() []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(f.prefix+"/r/", clientv3.WithPrefix()),
		clientv3.OpGet(f.prefix+"/a/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(f.prefix+"/d/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	}
}

// waitDead decides, on the answers of one drain round's replicaReads (rs),
// whether a replica that lost its lease may still have writes in flight:
// it records each one it finds (notice) and, while any dead key lives,
// pauses a poll at a time and reports waited (the caller reads again), or
// refuses w with fence_draining if the wait does not fit before deadline.
func (f *SharedFence) waitDead(ctx context.Context, w gateway.Write, rs []*etcdserverpb.ResponseOp, deadline time.Time, drain time.Duration) (waited bool, err error) {
	alive := make(map[string]bool)
	for _, kv := range rs[1].GetResponseRange().Kvs {
		alive[strings.TrimPrefix(string(kv.Key), f.prefix+"/a/")] = true
	}
	dead := len(rs[2].GetResponseRange().Kvs) > 0
	for _, kv := range rs[0].GetResponseRange().Kvs {
		id := strings.TrimPrefix(string(kv.Key), f.prefix+"/r/")
		if alive[id] {
			continue
		}
		// Registered, its lease gone: it may have died holding
		// markers whose writes are still on their way.
		if err := f.notice(ctx, id, kv); err != nil {
			return false, fencegate.Unavailable(w.Resource, fmt.Errorf("drain: %w", err))
		}
		dead = true
	}
	if !dead {
		return false, nil
	}
	bound, err := f.deadBound(ctx)
	if err != nil {
		return false, fencegate.Unavailable(w.Resource, fmt.Errorf("drain: %w", err))
	}
	if bound <= 0 {
		return false, nil
	}
	f.hold(w.Resource, bound)
	// No grace: a dead key is not deleted when its replica comes back
	// (with a new lease), it expires.
	if err := sharedfence.Pause(ctx, w, bound, deadline, drain, 0); err != nil {
		return false, err
	}
	return true, nil
}

// awaitGone is waitGone for w's drain: past deadline, fence_draining.
func (f *SharedFence) awaitGone(ctx context.Context, w gateway.Write, dir, end string, rev int64, deadline time.Time, drain time.Duration) error {
	if err := f.waitGone(ctx, dir, end, rev, deadline); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return sharedfence.Draining(w, drain, nil)
		}
		return fencegate.Unavailable(w.Resource, fmt.Errorf("drain: watch markers: %w", err))
	}
	return nil
}

// waitGone waits until a marker in [dir, end) is deleted after revision
// rev, or deadline.
func (f *Store) waitGone(ctx context.Context, dir, end string, rev int64, deadline time.Time) error {
	wctx, cancel := context.WithDeadline(clientv3.WithRequireLeader(ctx), deadline)
	defer cancel()
	f.requests.Add(1)
	for resp := range f.client.Watch(wctx, dir, clientv3.WithRange(end), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if resp.CompactRevision != 0 {
			// Compacted past the read: read again.
			return nil
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) > 0 {
			return nil
		}
	}
	if err := wctx.Err(); err != nil {
		return err
	}
	return errors.New("watch ended")
}

// notice turns the registration of replica id, whose lease is gone, into a
// dead key that lives for its forward timeout. One Txn decides it, so only
// the first drain to notice starts the wait.
func (f *SharedFence) notice(ctx context.Context, id string, kv *mvccpb.KeyValue) error {
	var reg registration
	if err := json.Unmarshal(kv.Value, &reg); err != nil || reg.ForwardTimeout <= 0 {
		reg.ForwardTimeout = f.forwardTimeout.Milliseconds()
	}
	ttl := int64(math.Ceil(float64(reg.ForwardTimeout)/1000)) + 1
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	g, err := f.client.Grant(ctx, ttl)
	if err != nil {
		return fmt.Errorf("grant the wait of a lost replica: %w", err)
	}
	rkey := string(kv.Key)
	akey := f.prefix + "/a/" + id
	f.requests.Add(1)
	resp, err := f.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(rkey), "=", kv.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(akey), "=", 0)).
		Then(clientv3.OpDelete(rkey), clientv3.OpPut(f.deadKey(id), string(kv.Value), clientv3.WithLease(g.ID))).
		Commit()
	if err != nil {
		return fmt.Errorf("record a lost replica: %w", err)
	}
	if !resp.Succeeded {
		f.client.Revoke(ctx, g.ID)
		return nil
	}
	f.log.Warn("etcd shared fence: a replica's lease expired; drains wait its forward timeout", "replica", reg.Replica, "lease", id, "wait", time.Duration(ttl)*time.Second)
	return nil
}

// deadBound returns how long until every dead key has expired.
func (f *SharedFence) deadBound(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.requests.Add(1)
	// Not WithKeysOnly: etcd 3.7 serves keys-only reads from its index,
	// without the lease each dead key's wait is read from.
	resp, err := f.client.Get(ctx, f.prefix+"/d/", clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	var bound time.Duration
	for _, kv := range resp.Kvs {
		f.requests.Add(1)
		ttl, err := f.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return 0, err
		}
		if ttl.TTL > 0 {
			bound = max(bound, time.Duration(ttl.TTL)*time.Second)
		} else if ttl.TTL == 0 || ttl.TTL == -1 && kv.Lease != 0 {
			// Expiring now: look again shortly.
			bound = max(bound, sharedfence.RecoveryPoll)
		}
	}
	return bound, nil
}

// Advance implements gateway.Fence: an operator's raise (never a lowering).
// It returns once no marker of an older token is left on the resource,
// and none below it (a collection's members) that existed at its first
// read, or the drain timeout has passed: a replica whose watch has not
// brought the raise yet admits writes of a token it holds a marker of
// without a read (join), so a raise is known everywhere only when those
// markers are gone. It sets nothing ready (the first write of the token
// drains as after any raise). Past the drain timeout (an older write
// still in flight) it returns the record not ready; the replica holding
// that write refuses older tokens as soon as its watch brings the raise.
func (f *SharedFence) Advance(ctx context.Context, res string, token int64, owner string) (fencegate.FenceState, error) {
	st, err := f.Store.AdvanceFence(ctx, res, token, owner)
	if err != nil {
		return st, err
	}
	f.superseded(res, st.Highest)
	f.letGoBelow(res)
	if _, err := f.drainOlder(ctx, res, st.Highest, time.Now().Add(f.drainTimeout)); err != nil {
		return st, fencegate.Unavailable(res, fmt.Errorf("advance: %w", err))
	}
	return f.State(ctx, res)
}

// drainOlder returns once no marker of a token below highest is left on
// res, and none below it (a collection's members) that existed at its
// first read (drained), or at deadline (not drained): what an operator's
// raise of res to highest waits for before it is known everywhere
// (Advance, ImportFences). A marker below put after that read read the
// raised record.
func (f *Store) drainOlder(ctx context.Context, res string, highest int64, deadline time.Time) (bool, error) {
	own := f.markerDir(res)
	older := own + pad(highest)
	mdir := f.prefix + "/m/" + resource.MemberPrefix(res)
	mend := clientv3.GetPrefixRangeEnd(mdir)
	var since int64
	for {
		rctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
		f.requests.Add(1)
		resp, err := f.client.Txn(rctx).Then(
			clientv3.OpGet(own, clientv3.WithRange(older), clientv3.WithCountOnly()),
			// Not keys only: the create revisions are what is read.
			clientv3.OpGet(mdir, clientv3.WithRange(mend)),
		).Commit()
		cancel()
		if err != nil {
			return false, fmt.Errorf("read the markers of older writes: %w", err)
		}
		if since == 0 {
			since = resp.Header.Revision
		}
		dir, end := own, older
		switch {
		case resp.Responses[0].GetResponseRange().Count > 0:
		case createdBy(resp.Responses[1].GetResponseRange().Kvs, since):
			dir, end = mdir, mend
		default:
			return true, nil
		}
		err = f.waitGone(ctx, dir, end, resp.Header.Revision, deadline)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("watch the markers of older writes: %w", err)
		}
	}
}

// State reads resource's record (Store.State), and hands what it read to
// this replica's markers as the watch would: a raise read here is refused
// by this replica from then on, even before its watch brings it (join).
func (f *SharedFence) State(ctx context.Context, res string) (fencegate.FenceState, error) {
	st, rev, err := f.stateAt(ctx, res)
	if err == nil && rev > 0 {
		f.observed(res, record{Highest: st.Highest, Ready: st.Ready}, rev)
	}
	return st, err
}

// LoadFence implements gateway.Store (State).
func (f *SharedFence) LoadFence(ctx context.Context, res string) (fencegate.FenceState, error) {
	return f.State(ctx, res)
}

// AdvanceFence is Advance (gateway.Store, for the server's other users).
func (f *SharedFence) AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	return f.Advance(ctx, resource, token, owner)
}

// Ping reports whether a linearizable read succeeds (a quorum answers)
// and, for a replica that admits writes, whether it holds a lease it can
// prove alive.
func (f *SharedFence) Ping(ctx context.Context) error {
	if err := f.Store.Ping(ctx); err != nil {
		return err
	}
	if f.noMarkers {
		return nil
	}
	f.mu.Lock()
	s, err := f.sess, f.lastErr
	f.mu.Unlock()
	if s == nil || !s.proven() {
		if err == nil {
			err = errors.New("no etcd lease yet")
		}
		return fmt.Errorf("the replica holds no etcd lease it can prove alive: %w", err)
	}
	return nil
}

// hold records that resource's drain waits d for a lost replica.
func (f *SharedFence) hold(resource string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = make(map[string]time.Time)
	}
	f.held[resource] = time.Now().Add(d)
}

// Recovery reports, for /readyz, the console and fencegate_recovering,
// whether drains of this replica wait for a lost replica's forward
// timeout. Memory only.
func (f *SharedFence) Recovery() gateway.RecoveryStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st gateway.RecoveryStatus
	now := time.Now()
	for r, until := range f.held {
		if !until.After(now) {
			delete(f.held, r)
			continue
		}
		st.Held++
		if until.After(st.Until) {
			st.Until = until
		}
	}
	if st.Held > 0 {
		st.Recovering = true
		st.Reason = "a replica's etcd lease expired while it may have had writes in flight; advances wait its forward timeout"
	}
	return st
}

// isLeaseGone reports whether err says the lease does not exist any more.
func isLeaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || err != nil && strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())
}
