package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/sharedfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SharedFence is the fence of several gateway replicas over one PostgreSQL
// database (fence mode "shared"). Every decision is made on the fence table;
// the protocol and its correctness argument are in docs/design.md §4:
//
//   - In-flight marker: a session-level SHARED advisory lock on a 64-bit
//     hash of the resource, held by one of a few long-lived marker sessions
//     of this replica for as long as any of its writes to that resource is
//     in flight (counted in memory, one lock per resource per session).
//     Marker sessions multiplex every write of the replica: a write in flight
//     holds no connection, and the statements of concurrent writes go out
//     together, one pipeline per round trip.
//   - The marker is taken with pg_try_advisory_lock_shared, then the fence
//     row is re-read by a separate statement (a fresh snapshot, after the lock
//     is held) and the decision is made on that read: either the read sees an
//     advance (refused), or the advance's drain must wait for this marker.
//     The same reason as for the reference protocol's FOR KEY SHARE
//     (TestKeyShareReturnsSupersededRow): a statement's snapshot predates
//     the locks it waits for. A write that joins a marker its session already
//     holds only re-reads the row. Either way: one round trip.
//   - Advance (token above highest): committed with a WAL flush in its own
//     transaction on the pool, before anything else happens.
//   - Drain (token == highest, not ready): the EXCLUSIVE advisory lock on the
//     resource's key (pg_advisory_xact_lock on a pooled connection, never a
//     marker session: a session's own shared locks would not block it), which
//     waits for every marker taken before the advance, then ready = true,
//     unless a marker session died within its forward timeout (below).
//
// A marker vanishes with its session (replica killed, link cut, database
// restarted) while the write it protected may still be on its way. Each
// marker session is registered in fence_session and holds a
// transaction-level liveness lock for its whole life; PostgreSQL releases
// that lock (transaction abort) before the session's advisory locks (session
// end), so a drain that got the exclusive lock and then finds a registered
// session's liveness lock gone knows the session may have died holding
// markers: it records when it noticed (dead_at) and does not set ready until
// the session's forward timeout has passed since. The replica side bounds
// every forward by that timeout, counted from before the marker was read,
// and aborts the forwards of a session it lost.
type SharedFence struct {
	// poolMode is set for good once a marker session found the database
	// behind a pooler that does not keep sessions (checkOwnSession).
	poolMode       atomic.Bool
	pool           *pgxpool.Pool
	guard          *Guard
	connConfig     *pgx.ConnConfig
	drainTimeout   time.Duration
	forwardTimeout time.Duration
	storeTimeout   time.Duration
	acquireTimeout time.Duration
	verify         func(ctx context.Context, resource string, token int64) error
	log            *slog.Logger
	replica        string
	markerIdle     time.Duration
	markerLinger   time.Duration
	lanes          []*lane

	roundTrips atomic.Int64
	statements atomic.Int64
	waited     atomic.Int64
	// listenGen counts the drain listener's ups and downs: odd while it is
	// up. A marker stays idle only within one up generation.
	listenGen atomic.Int64
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	forgets        forgetter // recovery_shared.go
	holds          holds
	onRecoveryWait func(ctx context.Context, resource string, waited time.Duration, err error)
}

// SharedFenceOptions tune a SharedFence. Zero values pick the defaults.
type SharedFenceOptions struct {
	// DrainTimeout bounds the wait of a newer write for older ones in
	// flight when the write names none (Write.DrainTimeout). Default 31s.
	DrainTimeout time.Duration
	// ForwardTimeout is the longest forward of any route (the largest
	// upstream or drain timeout). A write admitted by this replica is
	// aborted when ForwardTimeout has passed since its marker was read, and
	// a drain that finds one of this replica's marker sessions gone waits
	// ForwardTimeout before it lets a newer token through. Default 30s.
	ForwardTimeout time.Duration
	// StoreTimeout bounds one round trip that does not wait for other
	// writers. Default: the store's Timeout.
	StoreTimeout time.Duration
	// AcquireTimeout bounds the wait for a pooled connection (advances,
	// drains) and for a live marker session. Past it the write is refused
	// with 503 fence_unavailable. Default 1s.
	AcquireTimeout time.Duration
	// MarkerConns is the number of marker sessions (long-lived dedicated
	// connections, besides the pool and the drain listener) of this
	// replica. Default 1: its pipelines carry every write queued meanwhile. Negative:
	// none, for a process that runs no gateway (a coordinator alone): it
	// admits no write, and its death leaves no marker session for drains
	// to wait out.
	MarkerConns int
	// Replica names this replica in the fence_session table. Default
	// hostname/pid.
	Replica string
	// Verify, if set, is consulted before a write's token advances the
	// fence (never on the repeated-token path). It returns a
	// *fencegate.Error (unknown_fencing_token) to refuse the token; any
	// other error refuses the write with fence_unavailable.
	Verify func(ctx context.Context, resource string, token int64) error
	// MarkerLinger is how long a busy marker session (its last pipeline,
	// sent within ten lingers, carried several writes) holds a pipeline
	// for more writes to share it, up to lingerMarks of them. Default
	// markerLinger; negative: none (every pipeline goes out as soon as the
	// previous one is answered).
	MarkerLinger time.Duration
	// markerIdle overrides markerIdle (tests).
	markerIdle time.Duration
	// Logger receives warnings (a marker session lost with writes in
	// flight, a pooler in the wrong mode). Nil: slog.Default().
	Logger *slog.Logger
	// OnRecoveryWait, if set, is called once per write that waited for a
	// lost marker session's forward timeout, with the wait.
	OnRecoveryWait func(ctx context.Context, resource string, waited time.Duration, err error)
}

var _ gateway.Fence = (*SharedFence)(nil)

// ErrPoolMode is returned when the database is reached through a
// connection pooler that does not give each client connection its own
// server session (PgBouncer pool_mode transaction or statement): the
// markers are session-level advisory locks.
var ErrPoolMode = errors.New("fence mode shared needs a session of its own per connection: the database is reached through a pooler in transaction or statement mode (PgBouncer: use pool_mode = session for fencegate)")

var errNoMarkers = errors.New("this process runs no gateway (no marker sessions)")

// Marker sessions.
const (
	// sessionLockClass is the first key of the two-key advisory lock that
	// says a marker session is alive (the second is its fence_session id).
	// Markers use the one-key (bigint) space, which never collides with it.
	sessionLockClass = 0x66656e63 // "fenc"
	// heartbeatEvery: a marker session idle this long sends SELECT 1.
	heartbeatEvery = time.Second
	// markerIdleTimeout is the session's idle_in_transaction_session_timeout:
	// a replica that goes silent (host lost, link cut without a reset) has
	// its marker session ended by the database after this long.
	markerIdleTimeout = 10 * time.Second
	// unlockLinger: the unlock of a marker whose writes are done waits at
	// most this long for the next marker statement of its session, to share
	// its round trip; a drain may wait that much longer for it.
	unlockLinger = time.Millisecond
	// markerLinger: a busy marker session holds a pipeline up to this long
	// for more writes (SharedFenceOptions.MarkerLinger). Under concurrent
	// writes each statement then serves several of them, which is what
	// bounds the database's work per write; a write on a quiet session
	// goes out at once, so it adds nothing at a moderate rate. 1 ms: at
	// 300 µs a pipeline of a saturated pair served four writes, at 1 ms
	// six, with no change of p50 at 200 or 2,000 writes/s
	// (docs/performance.md); the writes of a saturated gateway wait far
	// longer than that for the CPU.
	markerLinger = time.Millisecond
	// lingerMarks: a held pipeline goes out once this many writes share it.
	lingerMarks = 16
	// maxBatch caps the writes of one pipeline.
	maxBatch = 512
	// markerIdle: a marker no write has held for this long is let go.
	markerIdle = time.Second
	// maxIdle caps the idle markers of one session: each is an entry in
	// the database's shared lock table, which is finite.
	maxIdle = 256
	// drainChannel is the channel a drain of token T notifies, payload
	// "K(R) T" in decimal, before it requests its exclusive lock.
	drainChannel = "fencegate_drain"
)

// NewSharedFence returns the shared fence over s. It starts its marker
// sessions in the background; until one is up, writes are refused with
// fence_unavailable (the database may be down at start). Close ends them.
func NewSharedFence(s *Store, opts SharedFenceOptions) *SharedFence {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = fencegate.DefaultDrainTimeout
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = fencegate.DefaultUpstreamTimeout
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = s.Timeout
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = fencegate.DefaultStoreTimeout
	}
	if opts.AcquireTimeout <= 0 {
		opts.AcquireTimeout = time.Second
	}
	if opts.MarkerConns == 0 {
		opts.MarkerConns = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.markerIdle <= 0 {
		opts.markerIdle = markerIdle
	}
	if opts.MarkerLinger == 0 {
		opts.MarkerLinger = markerLinger
	}
	if opts.Replica == "" {
		h, _ := os.Hostname()
		opts.Replica = h + "/" + strconv.Itoa(os.Getpid())
	}
	f := &SharedFence{
		pool:           s.Pool,
		guard:          s.guard,
		connConfig:     s.Pool.Config().ConnConfig,
		drainTimeout:   opts.DrainTimeout,
		forwardTimeout: opts.ForwardTimeout,
		storeTimeout:   opts.StoreTimeout,
		acquireTimeout: opts.AcquireTimeout,
		verify:         opts.Verify,
		log:            opts.Logger,
		replica:        opts.Replica,
		markerIdle:     opts.markerIdle,
		markerLinger:   max(opts.MarkerLinger, 0),
		closing:        make(chan struct{}),
		forgets:        forgetter{kick: make(chan struct{}, 1)},
		onRecoveryWait: opts.OnRecoveryWait,
	}
	for range opts.MarkerConns {
		l := &lane{f: f, up: make(chan struct{})}
		f.lanes = append(f.lanes, l)
		f.wg.Go(l.run)
	}
	if len(f.lanes) > 0 {
		f.wg.Go(f.listen)
		f.wg.Go(f.runForget)
	}
	return f
}

// RoundTrips returns the number of database round trips the fence made
// (marker pipelines, pooled statements and pipelines), for benchmarks.
func (f *SharedFence) RoundTrips() int64 { return f.roundTrips.Load() }

// MarkerStatements returns the number of statements the marker sessions
// sent (locks, unlocks, reads, heartbeats), for benchmarks.
func (f *SharedFence) MarkerStatements() int64 { return f.statements.Load() }

// WaitedRoundTrips returns the number of round trips writes waited for
// before their decision (the critical path); unlocks after a write and
// heartbeats are not among them.
func (f *SharedFence) WaitedRoundTrips() int64 { return f.waited.Load() }

// Ready waits until every marker session is up, or ctx ends. It returns
// ErrPoolMode at once if a session found the pooler in the wrong mode.
func (f *SharedFence) Ready(ctx context.Context) error {
	for _, l := range f.lanes {
		for {
			l.mu.Lock()
			up, err := l.up, l.lastErr
			l.mu.Unlock()
			if errors.Is(err, ErrPoolMode) || f.poolMode.Load() {
				return ErrPoolMode
			}
			select {
			case <-up:
			case <-ctx.Done():
				if err != nil {
					return fmt.Errorf("%w: %v", ctx.Err(), err)
				}
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
	}
	return nil
}

// Close ends the marker sessions. A session with no write in flight
// unregisters itself first, so drains do not wait for it; one with writes in
// flight is left to be found gone (its writes may still land).
func (f *SharedFence) Close() error {
	f.closeOnce.Do(func() {
		close(f.closing)
		for _, l := range f.lanes {
			l.mu.Lock()
			s := l.sess
			l.mu.Unlock()
			if s != nil {
				s.wakeUp()
			}
		}
		f.wg.Wait()
	})
	return nil
}

// The statements of the protocol. $1 is always the resource (or its key).
const (
	// The marker statements of one pipeline, each for all of its writes:
	// the read is a statement of its own after the try-locks, so that its
	// snapshot is taken after they were granted (docs/design.md §4).
	markerTrySQL    = `SELECT k, pg_try_advisory_lock_shared(k) FROM unnest($1::bigint[]) AS u(k)`
	markerReadSQL   = `SELECT resource, highest, ready FROM fence WHERE resource = ANY($1::text[])`
	markerUnlockSQL = `SELECT pg_advisory_unlock_shared(k) FROM unnest($1::bigint[]) AS u(k)`
	// drainNotifySQL tells every replica's listener that a drain of token
	// T is about to wait for K(R) ("K T"): idle markers of older tokens on
	// it are let go at once. Committed in a transaction of its own before
	// the drain's: a notification is delivered only when its transaction
	// commits.
	drainNotifySQL = `SELECT pg_notify('` + drainChannel + `', $1::bigint::text || ' ' || $2::bigint::text)`

	// The drain, one transaction. The lock is taken only on a row not yet
	// ready: (T, ready) is final for token T, and a new resource starts
	// ready (nobody can have a write in flight under a fence that did not
	// exist). ready = true may be lost in a crash (asynchronous commit): the
	// next writer then drains again, which is harmless.
	drainSettingsSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`
	drainLockSQL     = `SELECT pg_advisory_xact_lock($2) FROM fence WHERE resource = $1 AND NOT ready`
	// drainDeadSQL records when a registered marker session was first found
	// gone (its liveness lock released), after the exclusive lock is held.
	// A session that died releases its liveness lock (transaction abort)
	// before its markers (session end), so one whose marker let the lock be
	// granted is seen gone here.
	drainDeadSQL = `UPDATE fence_session s SET dead_at = clock_timestamp()
 WHERE s.dead_at IS NULL
   AND EXISTS (SELECT 1 FROM fence WHERE resource = $1 AND NOT ready)
   AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
                     AND l.classid = ` + sessionLockClassSQL + ` AND l.objid = s.id::oid AND l.objsubid = 2)`
	// drainBoundSQL (a fresh snapshot: it sees dead_at set by concurrent
	// drains, whose UPDATE this one's waited for) says how long until every
	// session found gone has passed its forward timeout.
	drainBoundSQL = `SELECT coalesce(extract(epoch FROM max(dead_at + forward_timeout) - clock_timestamp()), 0)::float8
  FROM fence_session WHERE dead_at IS NOT NULL AND EXISTS (SELECT 1 FROM fence WHERE resource = $1 AND NOT ready)`
	drainReadySQL = `UPDATE fence SET ready = true, updated_at = clock_timestamp()
 WHERE resource = $1 AND highest = $2 AND NOT ready
   AND NOT EXISTS (SELECT 1 FROM fence_session WHERE dead_at + forward_timeout > clock_timestamp())`

	sessionLockClassSQL = "1717923427" // sessionLockClass in decimal

	sessionBeginSQL    = `BEGIN ISOLATION LEVEL READ COMMITTED`
	sessionSettingsSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('statement_timeout', $2, true), set_config('lock_timeout', $2, true)`
	sessionLockSQL     = `SELECT pg_advisory_xact_lock(` + sessionLockClassSQL + `, $1)`
	sessionRegisterSQL = `INSERT INTO fence_session (id, replica, backend_pid, forward_timeout) VALUES ($1, $2, $3, make_interval(secs => $4))`
	// sessionSweepSQL removes sessions whose wait ended long ago.
	sessionSweepSQL = `DELETE FROM fence_session WHERE dead_at + forward_timeout < clock_timestamp() - interval '1 minute'`
	// sessionNoticeSQL: a new session notices the ones gone meanwhile, so
	// their wait starts now rather than at the next drain.
	sessionNoticeSQL = `UPDATE fence_session s SET dead_at = clock_timestamp()
 WHERE s.dead_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
                     AND l.classid = ` + sessionLockClassSQL + ` AND l.objid = s.id::oid AND l.objsubid = 2)`
	sessionUnregisterSQL = `DELETE FROM fence_session WHERE id = $1`
)

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// lockKey is the marker's advisory lock key of a resource. Two resources
// with one key share their markers: a drain of one then also waits for the
// other's writes, which costs time, never safety.
func lockKey(resource string) int64 {
	h := fnv.New64a()
	h.Write([]byte(resource))
	return int64(h.Sum64())
}

// Admit implements gateway.Fence.
func (f *SharedFence) Admit(ctx context.Context, w gateway.Write) (gateway.Permit, error) {
	if err := f.admissible(ctx, w); err != nil {
		return nil, err
	}
	switch w.Scope {
	case gateway.ScopeTree:
		return f.AdmitTree(ctx, w, nil)
	case gateway.ScopeMember:
		// Decided only with the member's own marker held (AdmitTree).
		return nil, fencegate.Unavailable(w.Resource, sharedfence.ErrMemberAlone)
	}
	deadline, drain := sharedfence.DrainDeadline(w, f.drainTimeout)
	return f.admitKey(ctx, w, nil, deadline, drain)
}

// admissible refuses every write while the fence cannot decide any.
func (f *SharedFence) admissible(ctx context.Context, w gateway.Write) error {
	if f.poolMode.Load() {
		return fencegate.Unavailable(w.Resource, ErrPoolMode)
	}
	if len(f.lanes) == 0 {
		return fencegate.Unavailable(w.Resource, errNoMarkers)
	}
	if err := f.guard.Err(w.Resource); err != nil {
		return err
	}
	if floor := f.guard.Floor(); w.Token <= floor && !gateway.FromTokenSource(ctx) {
		// Issued before the store's last recovery (Store.Recover): worthless
		// whatever this store's fence row says. Not a token-source route's:
		// its numbers come from another counter, which the recovery did
		// not raise (RecoverOptions.Foreign).
		return fencegate.StaleError(w.Resource, w.Token, floor)
	}
	return nil
}

// admitKey admits w on its own key (§4's protocol); a ScopeTree write's
// advance and drain also wait for its members (treeDrain). The marker's
// read also reads the rows of scope (the permit's rows, AdmitTree). The
// caller checked the pool mode, the lanes and the guard.
func (f *SharedFence) admitKey(ctx context.Context, w gateway.Write, scope []string, deadline time.Time, drain time.Duration) (gateway.Permit, error) {
	key := lockKey(w.Resource)
	l := f.lane(key)
	verified := w.Verified
	backoff := 2 * time.Millisecond
	var held time.Time // when the write began waiting for a lost session
	defer func() {
		if !held.IsZero() {
			f.holds.done(w.Resource)
			if f.onRecoveryWait != nil {
				f.onRecoveryWait(ctx, w.Resource, time.Since(held), nil)
			}
		}
	}()
	hold := func(bound time.Duration) {
		if bound > 0 && held.IsZero() {
			held = time.Now()
			f.holds.add(w.Resource, held.Add(bound))
		}
	}
	for {
		m, err := l.mark(ctx, w, key, scope)
		if err != nil {
			return nil, err
		}
		switch {
		case m.permit != nil:
			// The marker may be on a session opened just now to a promoted
			// standby: the guard checked it before its first use.
			if err := f.guard.Err(w.Resource); err != nil {
				m.permit.Release()
				return nil, err
			}
			return m.permit, nil
		case m.exists && w.Token < m.highest:
			return nil, fencegate.StaleError(w.Resource, w.Token, m.highest)
		case m.gone != nil:
			// This session's marker for the resource belongs to an older
			// token: wait until its writes are done (a drain would wait for
			// them anyway), then take a marker of our own.
			if err := f.sleep(ctx, w, m.gone, deadline, drain); err != nil {
				return nil, err
			}
			continue
		case !m.exists || w.Token > m.highest:
			if f.verify != nil && !verified {
				if err := f.checkIssued(ctx, w.Resource, w.Token); err != nil {
					return nil, err
				}
				verified = true
			}
			var st drainState
			var err error
			if w.Scope == gateway.ScopeTree {
				st, err = f.treeDrain(ctx, w, w.Resource, w.Token, true, time.Until(deadline))
			} else {
				st, err = f.advanceAndDrain(ctx, w, key, time.Until(deadline))
			}
			if err != nil {
				return nil, err
			}
			l.superseded(key, st.Highest)
			hold(st.bound)
			if err := f.pause(ctx, w, st.bound, deadline, drain); err != nil {
				return nil, err
			}
		case !m.ready:
			var st drainState
			var err error
			if w.Scope == gateway.ScopeTree {
				st, err = f.treeDrain(ctx, w, w.Resource, w.Token, false, time.Until(deadline))
			} else {
				st, err = f.drainOlder(ctx, w, key, time.Until(deadline))
			}
			if err != nil {
				return nil, err
			}
			hold(st.bound)
			if err := f.pause(ctx, w, st.bound, deadline, drain); err != nil {
				return nil, err
			}
		default:
			// Ready at this token but the marker was refused: a drain holds
			// or waits for the exclusive lock right now. Try again shortly.
			if err := f.pause(ctx, w, backoff, deadline, drain); err != nil {
				return nil, err
			}
			backoff = min(2*backoff, 50*time.Millisecond)
		}
	}
}

// sleep waits for ch (nil: not at all), bounded by deadline and ctx; past
// deadline the write is refused with fence_draining.
func (f *SharedFence) sleep(ctx context.Context, w gateway.Write, ch <-chan struct{}, deadline time.Time, drain time.Duration) error {
	left := time.Until(deadline)
	if left <= 0 {
		return draining(w, drain, nil)
	}
	if ch == nil {
		return nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return draining(w, drain, nil)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pause waits out a gone marker session's forward timeout d, or a
// backoff (sharedfence.Pause): the bound is gone as soon as the session's
// replica came back and found its writes ended (recovery_shared.go), so a
// bound that does not fit keeps being polled for recoveryGrace.
func (f *SharedFence) pause(ctx context.Context, w gateway.Write, d time.Duration, deadline time.Time, drain time.Duration) error {
	return sharedfence.Pause(ctx, w, d, deadline, drain, recoveryGrace)
}

func draining(w gateway.Write, drain time.Duration, err error) error {
	return sharedfence.Draining(w, drain, err)
}

// drainState is what an advance or drain round trip found.
type drainState struct {
	Highest int64
	bound   time.Duration // > 0: a gone session's forward timeout has not passed
}

// advanceAndDrain raises the fence to w.Token (committed with a WAL flush)
// and drains the writes of older tokens, in one round trip.
func (f *SharedFence) advanceAndDrain(ctx context.Context, w gateway.Write, key int64, drain time.Duration) (drainState, error) {
	b := &pgx.Batch{}
	queueAdvance(b, w.Resource, w.Token, w.Owner)
	queueDrain(b, w.Resource, w.Token, key, drain)
	return f.runDrain(ctx, w, b, true, drain)
}

// drainOlder drains the writes older than w.Token (already the highest).
func (f *SharedFence) drainOlder(ctx context.Context, w gateway.Write, key int64, drain time.Duration) (drainState, error) {
	b := &pgx.Batch{}
	queueDrain(b, w.Resource, w.Token, key, drain)
	return f.runDrain(ctx, w, b, false, drain)
}

func queueDrain(b *pgx.Batch, resource string, token, key int64, drain time.Duration) {
	b.Queue("BEGIN")
	b.Queue(drainNotifySQL, key, token)
	b.Queue("COMMIT")
	b.Queue("BEGIN")
	b.Queue(drainSettingsSQL, ms(max(drain, time.Millisecond)), ms(drain+time.Second))
	b.Queue(drainLockSQL, resource, key)
	b.Queue(drainDeadSQL, resource)
	b.Queue(drainBoundSQL, resource)
	b.Queue(drainReadySQL, resource, token)
	b.Queue("COMMIT")
}

func (f *SharedFence) runDrain(ctx context.Context, w gateway.Write, b *pgx.Batch, advance bool, drain time.Duration) (st drainState, err error) {
	if drain <= 0 {
		return st, draining(w, drain, nil)
	}
	conn, err := f.acquire(ctx, w.Resource)
	if err != nil {
		return st, err
	}
	defer f.finish(conn)
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout+drain)
	defer cancel()
	f.roundTrips.Add(1)
	f.waited.Add(1)
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fencegate.Unavailable(w.Resource, cerr)
		}
	}()
	st.Highest = w.Token
	if advance {
		if _, _, err := readAdvance(br); err != nil {
			return st, fencegate.Unavailable(w.Resource, fmt.Errorf("advance fence to %d: %w", w.Token, err))
		}
	}
	// queueDrain's statements up to the drain's COMMIT, which Close reads.
	for i := range 9 {
		switch i {
		case 5: // the lock
			if _, err = br.Exec(); err != nil {
				var pe *pgconn.PgError
				if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014") {
					return st, draining(w, drain, err)
				}
				return st, fencegate.Unavailable(w.Resource, err)
			}
		case 7: // the bound
			var secs float64
			if err = br.QueryRow().Scan(&secs); err != nil {
				return st, fencegate.Unavailable(w.Resource, err)
			}
			if secs > 0 {
				st.bound = time.Duration(secs * float64(time.Second))
			}
		default:
			if _, err = br.Exec(); err != nil {
				return st, fencegate.Unavailable(w.Resource, err)
			}
		}
	}
	return st, nil
}

// acquire takes a pooled connection, waiting at most acquireTimeout.
func (f *SharedFence) acquire(ctx context.Context, resource string) (*pgxpool.Conn, error) {
	actx, cancel := context.WithTimeout(ctx, f.acquireTimeout)
	defer cancel()
	conn, err := f.pool.Acquire(actx)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	st := f.pool.Stat()
	if st.AcquiredConns() >= st.MaxConns() {
		err = fmt.Errorf("all %d pooled database connections are busy with advances and drains (store.postgres.max_conns): %w", st.MaxConns(), err)
	}
	return nil, fencegate.Unavailable(resource, err)
}

// finish ends whatever transaction conn has open and returns it to the
// pool. A connection that cannot be rolled back is closed by the pool.
func (f *SharedFence) finish(conn *pgxpool.Conn) {
	pc := conn.Conn().PgConn()
	if !pc.IsClosed() && pc.TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
		f.roundTrips.Add(1)
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			conn.Conn().Close(ctx)
		}
		cancel()
	}
	conn.Release()
}

// checkIssued consults the verifier before an advance.
func (f *SharedFence) checkIssued(ctx context.Context, resource string, token int64) error {
	vctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.roundTrips.Add(1)
	f.waited.Add(1)
	return fencegate.Unverified(resource, token, f.verify(vctx, resource, token))
}

// State implements gateway.Fence. Ready is the durable flag: false after an
// advance until a writer of the new token has drained the older ones.
func (f *SharedFence) State(ctx context.Context, resource string) (fencegate.FenceState, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.roundTrips.Add(1)
	st, err := loadFence(ctx, f.pool, resource)
	if err != nil {
		return st, fencegate.Unavailable(resource, err)
	}
	return st, nil
}

// Advance implements gateway.Fence: an operator's raise, or the
// coordinator's when it issues a token (fence on issuance). It is committed
// with a WAL flush; writes of older tokens are refused from then on, and
// the first write of the new token drains those still in flight.
func (f *SharedFence) Advance(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	if err := f.guard.Err(resource); err != nil {
		return fencegate.FenceState{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.roundTrips.Add(1)
	st, raised, err := advanceFence(ctx, f.pool, resource, token, owner)
	if err != nil {
		return st, fencegate.Unavailable(resource, fmt.Errorf("advance fence to %d: %w", token, err))
	}
	if !raised {
		return f.State(ctx, resource)
	}
	f.lane(lockKey(resource)).superseded(lockKey(resource), st.Highest)
	st.Resource = resource
	return st, nil
}

// Raised tells this replica that resource's fence row was raised to
// highest elsewhere than through Advance: by the coordinator's acquisition
// in the same statement (Leases.RaiseFence). It does no I/O: it closes this
// replica's marker of an older token to writers, as Advance does after its
// raise, so writers of older tokens here are refused without a round trip.
// Correctness does not depend on it: every write re-reads the row.
func (f *SharedFence) Raised(resource string, highest int64) {
	key := lockKey(resource)
	f.lane(key).superseded(key, highest)
}

// lane returns the marker session slot of key, nil if this fence has none
// (MarkerConns < 0).
func (f *SharedFence) lane(key int64) *lane {
	if len(f.lanes) == 0 {
		return nil
	}
	return f.lanes[uint64(key)%uint64(len(f.lanes))]
}
