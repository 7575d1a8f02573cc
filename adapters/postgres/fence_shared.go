package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SharedFence is the fence of several gateway replicas over one PostgreSQL
// database (fence mode "shared"). It keeps no state in memory: every write
// runs the protocol of docs/design.md §4 against the fence table.
//
//   - In-flight marker: a transaction holding FOR KEY SHARE on the
//     resource's row for the whole forward; Permit.Release commits it. The
//     marker only holds a lock, so it commits with synchronous_commit = off.
//   - Advance (token above highest): raised in a transaction of its own,
//     committed with a WAL flush before anything else happens. It does not
//     wait for the markers (a non-key update does not conflict with KEY
//     SHARE), so older writers arriving later see the new highest.
//   - Drain (token == highest, not ready): SELECT .. FOR UPDATE waits until
//     every marker taken before the advance is committed, then ready = true.
//
// The marker is taken by two statements, not one: the lock, then a re-read
// of the row with a fresh snapshot, and the decision is made on the re-read.
// FOR KEY SHARE returns the row version of the statement's snapshot even if
// a non-key update committed before the lock was granted (PostgreSQL need
// not follow the update chain for a lock that does not conflict with it), so
// a single "SELECT highest, ready .. FOR KEY SHARE" whose snapshot predates
// an advance can be granted after the advance and its drain completed and
// still report the old highest (TestKeyShareReturnsSupersededRow). The
// re-read runs after the lock is held: either it sees the advance (refused)
// or the advance's drain must wait for this marker.
//
// Round trips: a repeated token costs two (BEGIN, settings, lock and re-read
// sent as one pipeline; COMMIT after the forward); an advance costs one more
// (rollback, advance, drain and a new marker as one pipeline), plus one if
// tokens are verified.
type SharedFence struct {
	pool           *pgxpool.Pool
	drainTimeout   time.Duration
	forwardTimeout time.Duration
	storeTimeout   time.Duration
	acquireTimeout time.Duration
	verify         func(ctx context.Context, resource string, token int64) error
	log            *slog.Logger

	roundTrips atomic.Int64
}

// SharedFenceOptions tune a SharedFence. Zero values pick the defaults.
type SharedFenceOptions struct {
	// DrainTimeout bounds the wait of a newer write for older ones in
	// flight when the write names none (Write.DrainTimeout). Default 31s.
	DrainTimeout time.Duration
	// ForwardTimeout is the longest forward of any route (the largest
	// upstream timeout). The database ends an in-flight marker whose
	// transaction stayed idle longer than ForwardTimeout plus the drain
	// timeout plus 5s (idle_in_transaction_session_timeout), so the marker of
	// a replica that vanished without closing its connection is released,
	// but never before that replica's own forward has timed out. Default 30s.
	ForwardTimeout time.Duration
	// StoreTimeout bounds one round trip that does not wait for other
	// writers. Default: the store's Timeout.
	StoreTimeout time.Duration
	// AcquireTimeout bounds the wait for a free pooled connection. Every
	// write in flight holds one, so a full pool means the replica is at its
	// limit: past AcquireTimeout the write is refused with 503
	// fence_unavailable rather than queued without bound. Default 1s.
	AcquireTimeout time.Duration
	// Verify, if set, is consulted before a write's token advances the
	// fence (never on the repeated-token path). It returns a
	// *fencegate.Error (unknown_fencing_token) to refuse the token; any
	// other error refuses the write with fence_unavailable.
	Verify func(ctx context.Context, resource string, token int64) error
	// Logger receives warnings (a marker lost before its write ended).
	// Nil: slog.Default().
	Logger *slog.Logger
}

var _ gateway.Fence = (*SharedFence)(nil)

// NewSharedFence returns the shared fence over s's pool.
func NewSharedFence(s *Store, opts SharedFenceOptions) *SharedFence {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 31 * time.Second
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = 30 * time.Second
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = s.Timeout
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = 5 * time.Second
	}
	if opts.AcquireTimeout <= 0 {
		opts.AcquireTimeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &SharedFence{
		pool:           s.Pool,
		drainTimeout:   opts.DrainTimeout,
		forwardTimeout: opts.ForwardTimeout,
		storeTimeout:   opts.StoreTimeout,
		acquireTimeout: opts.AcquireTimeout,
		verify:         opts.Verify,
		log:            opts.Logger,
	}
}

// RoundTrips returns the number of database round trips the fence made
// (pipelines, single statements and commits), for benchmarks and metrics.
func (f *SharedFence) RoundTrips() int64 { return f.roundTrips.Load() }

// The statements of the protocol. $1 is always the resource.
const (
	// markerSettingsSQL: the marker only holds a lock, so its commit need
	// not wait for the WAL flush; and the database ends it if the replica
	// goes silent (see SharedFenceOptions.ForwardTimeout).
	markerSettingsSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('idle_in_transaction_session_timeout', $1, true)`
	// markerLockSQL locks only when the snapshot says the write may go: a
	// stale or advancing writer takes no lock, so a stream of stale writes
	// cannot keep a drain waiting.
	markerLockSQL = `SELECT 1 FROM fence WHERE resource = $1 AND highest = $2 AND ready FOR KEY SHARE`
	markerReadSQL = `SELECT highest, ready FROM fence WHERE resource = $1`
	// The drain waits (bounded by the write's drain timeout) for every
	// marker on the row: FOR UPDATE conflicts with FOR KEY SHARE. Only a
	// row not yet ready is locked; (T, ready) is final for token T, so
	// skipping the lock then is safe, and the UPDATE's own condition makes
	// it a no-op. ready = true may be lost in a crash (asynchronous commit):
	// the next writer then drains again, which is harmless.
	drainSettingsSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`
	drainLockSQL     = `SELECT 1 FROM fence WHERE resource = $1 AND NOT ready FOR UPDATE`
	drainReadySQL    = `UPDATE fence SET ready = true, updated_at = clock_timestamp() WHERE resource = $1 AND highest = $2 AND NOT ready`
)

// step is what one queued statement's result means to the protocol.
type step int

const (
	stepExec     step = iota // result ignored
	stepAdvance              // the advance's RETURNING row, if raised
	stepDrain                // the drain's lock: its timeout is fence_draining
	stepMarkLock             // a row means the marker holds the lock
	stepMarkRead             // highest and ready after the lock
)

// pipeline is one round trip: statements sent together, read in order.
type pipeline struct {
	b     pgx.Batch
	steps []step
	drain time.Duration // > 0 if it contains a drain
}

func (p *pipeline) queue(s step, sql string, args ...any) {
	p.b.Queue(sql, args...)
	p.steps = append(p.steps, s)
}

func (p *pipeline) marker(resource string, token int64, idle time.Duration) {
	p.queue(stepExec, "BEGIN")
	p.queue(stepExec, markerSettingsSQL, ms(idle))
	p.queue(stepMarkLock, markerLockSQL, resource, token)
	p.queue(stepMarkRead, markerReadSQL, resource)
}

func (p *pipeline) advance(resource string, token int64, owner string) {
	p.queue(stepExec, "BEGIN")
	p.queue(stepExec, durableSQL)
	p.queue(stepAdvance, advanceSQL, resource, token, owner)
	p.queue(stepExec, "COMMIT")
}

func (p *pipeline) drainOlder(resource string, token int64, timeout time.Duration) {
	p.queue(stepExec, "BEGIN")
	p.queue(stepExec, drainSettingsSQL, ms(timeout), ms(timeout+time.Second))
	p.queue(stepDrain, drainLockSQL, resource)
	p.queue(stepExec, drainReadySQL, resource, token)
	p.queue(stepExec, "COMMIT")
	p.drain = timeout
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// markState is what the marker's statements found.
type markState struct {
	locked  bool // the marker holds FOR KEY SHARE on the row
	exists  bool
	highest int64
	ready   bool
}

// run sends p and reads its results. failed is the step whose statement
// failed, if any.
func (f *SharedFence) run(ctx context.Context, conn *pgxpool.Conn, p *pipeline) (m markState, failed step, err error) {
	timeout := f.storeTimeout
	if p.drain > 0 {
		timeout += p.drain
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f.roundTrips.Add(1)
	br := conn.SendBatch(ctx, &p.b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			failed, err = stepExec, cerr
		}
	}()
	for _, s := range p.steps {
		switch s {
		case stepExec, stepDrain:
			_, err = br.Exec()
		case stepAdvance:
			_, err = scanFence(br.QueryRow())
		case stepMarkLock:
			var one int
			err = br.QueryRow().Scan(&one)
			m.locked = err == nil
		case stepMarkRead:
			err = br.QueryRow().Scan(&m.highest, &m.ready)
			m.exists = err == nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		if err != nil {
			return m, s, err
		}
	}
	return m, 0, nil
}

// maxRounds bounds the protocol's loop. Each round makes progress (an
// advance, a drain, or a re-read after the row changed between two
// statements), so it is reached only if the fence changes all the time.
const maxRounds = 8

// Admit implements gateway.Fence.
func (f *SharedFence) Admit(ctx context.Context, w gateway.Write) (gateway.Permit, error) {
	drain := w.DrainTimeout
	if drain <= 0 {
		drain = f.drainTimeout
	}
	idle := max(f.forwardTimeout, drain) + drain + 5*time.Second

	conn, err := f.acquire(ctx, w.Resource)
	if err != nil {
		return nil, err
	}
	admitted := false
	defer func() {
		if !admitted {
			f.finish(conn)
		}
	}()

	p := &pipeline{}
	p.marker(w.Resource, w.Token, idle)
	verified := false
	for range maxRounds {
		m, failed, err := f.run(ctx, conn, p)
		if err != nil {
			return nil, f.refusal(w, failed, drain, err)
		}
		p = &pipeline{}
		p.queue(stepExec, "ROLLBACK")
		switch {
		case m.exists && w.Token < m.highest:
			return nil, fencegate.StaleError(w.Resource, w.Token, m.highest)
		case !m.exists || w.Token > m.highest:
			if f.verify != nil && !verified {
				if err := f.checkIssued(ctx, w.Resource, w.Token); err != nil {
					return nil, err
				}
				verified = true
			}
			p.advance(w.Resource, w.Token, w.Owner)
			p.drainOlder(w.Resource, w.Token, drain)
		case !m.ready:
			p.drainOlder(w.Resource, w.Token, drain)
		case m.locked:
			admitted = true
			return &sharedPermit{f: f, conn: conn, resource: w.Resource, token: w.Token}, nil
		default:
			// Ready at this token, but the row changed between the lock
			// and the re-read (a drain finished): take the marker again.
		}
		p.marker(w.Resource, w.Token, idle)
	}
	return nil, fencegate.Unavailable(w.Resource, fmt.Errorf("fence of %s kept changing for %d rounds", w.Resource, maxRounds))
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
		err = fmt.Errorf("all %d database connections hold writes in flight (store.postgres.max_conns): %w", st.MaxConns(), err)
	}
	return nil, fencegate.Unavailable(resource, err)
}

// checkIssued consults the verifier before an advance.
func (f *SharedFence) checkIssued(ctx context.Context, resource string, token int64) error {
	vctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.roundTrips.Add(1)
	err := f.verify(vctx, resource, token)
	var fe *fencegate.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return fe
	default:
		return fencegate.Unavailable(resource, fmt.Errorf("verify token %d: %w", token, err))
	}
}

// refusal turns a failed round trip into the write's refusal: the drain
// running out of time is fence_draining, anything else fence_unavailable
// (invariant I4: the write is not forwarded).
func (f *SharedFence) refusal(w gateway.Write, failed step, drain time.Duration, err error) error {
	if failed == stepDrain {
		var pe *pgconn.PgError
		timedOut := errors.Is(err, context.DeadlineExceeded) ||
			errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014") // lock_not_available, query_canceled
		if timedOut {
			return &fencegate.Error{
				Status: http.StatusServiceUnavailable, Code: fencegate.CodeFenceDraining,
				Message:  fmt.Sprintf("an older write for %s is still in flight after %s; not forwarding token %d before it ends", w.Resource, drain, w.Token),
				Resource: w.Resource, Token: w.Token, Highest: w.Token,
				RetryAfter: time.Second, Err: err,
			}
		}
	}
	return fencegate.Unavailable(w.Resource, err)
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

// sharedPermit is a write in flight: its marker transaction stays open on
// conn until Release commits it.
type sharedPermit struct {
	f        *SharedFence
	conn     *pgxpool.Conn
	resource string
	token    int64
	once     sync.Once
}

// Release implements gateway.Permit.
func (p *sharedPermit) Release() {
	p.once.Do(func() {
		f := p.f
		ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
		defer cancel()
		f.roundTrips.Add(1)
		if _, err := p.conn.Exec(ctx, "COMMIT"); err != nil {
			// The database ended the marker before the write did (idle
			// timeout, restart, lost connection): a newer write may have
			// been drained past it. Worth an operator's attention.
			f.log.Warn("in-flight marker ended before its write", "resource", p.resource, "token", p.token, "err", err)
			p.conn.Conn().Close(ctx)
		}
		p.conn.Release()
	})
}

// State implements gateway.Fence. Ready is the durable flag: false after an
// advance until a writer of the new token has drained the older ones.
func (f *SharedFence) State(ctx context.Context, resource string) (fencegate.FenceState, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	f.roundTrips.Add(1)
	st, err := scanFence(f.pool.QueryRow(ctx, loadFenceSQL, resource))
	if errors.Is(err, pgx.ErrNoRows) {
		return fencegate.FenceState{Resource: resource, Ready: true}, nil
	}
	if err != nil {
		return st, fencegate.Unavailable(resource, err)
	}
	st.Resource = resource
	return st, nil
}

// Advance implements gateway.Fence: an operator's raise, or the
// coordinator's when it issues a token (fence on issuance). It is committed
// with a WAL flush; writes of older tokens are refused from then on, and
// the first write of the new token drains those still in flight.
func (f *SharedFence) Advance(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	ctx, cancel := context.WithTimeout(ctx, f.storeTimeout)
	defer cancel()
	p := &pipeline{}
	p.advance(resource, token, owner)
	f.roundTrips.Add(1)
	br := f.pool.SendBatch(ctx, &p.b)
	st, raised, err := readAdvance(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return st, fencegate.Unavailable(resource, fmt.Errorf("advance fence to %d: %w", token, err))
	}
	if !raised {
		return f.State(ctx, resource)
	}
	st.Resource = resource
	return st, nil
}
