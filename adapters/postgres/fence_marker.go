package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/sharedfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A lane is one marker session slot of a replica: the session currently up
// (nil while it is being (re)connected) and the loop that reconnects it.
// A resource always uses the lane of its key, so all of this replica's
// markers of one resource are on one session.
type lane struct {
	f  *SharedFence
	mu sync.Mutex
	// sess is the live session, nil while connecting.
	sess *session
	// up is closed while sess is set; a new one is made when it is lost.
	up      chan struct{}
	lastErr error
}

// session is one marker connection: its statements run in one long
// READ COMMITTED transaction (each statement still takes a fresh snapshot)
// that holds the session's liveness lock; the markers are session-level
// advisory locks and outlive nothing but the connection.
type session struct {
	l    *lane
	id   int32
	conn *pgx.Conn

	// Guarded by l.mu.
	entries map[int64]*entry
	// idle holds the entries of entries that no write holds but whose
	// marker is kept (sticky markers, docs/design.md §4).
	idle  map[int64]*entry
	queue []*op
	lost  bool
	// lostLeft counts, once the session is lost, its writes still in
	// flight; its row is forgotten when it reaches 0, and not before
	// lostUntil (recovery_shared.go).
	lostLeft  int
	lostUntil time.Time
	wake      chan struct{} // cap 1: the worker has something to send
	// marks counts the opMark and opPing in queue; unlocksSince is when the
	// oldest unlock in queue was queued (zero if none), marksSince the
	// oldest mark. busy: the last pipeline, sent at lastSend, carried
	// several marks.
	marks        int
	unlocksSince time.Time
	marksSince   time.Time
	busy         bool
	lastSend     time.Time
}

// entry is the shared advisory lock of one key on one session and the
// writes that hold it.
type entry struct {
	key     int64
	token   int64         // writers of this token join; others do not
	highest int64         // the highest token any read through this entry saw
	count   int           // writers holding the entry (admitted, or being decided)
	held    bool          // the session holds the shared lock
	closed  bool          // the fence moved on: no writer joins any more
	gone    chan struct{} // closed when the entry is released or its session lost
	ended   bool
	// listenGen is the drain listener's generation at the entry's last
	// read; idleSince is when its last write ended (kept idle).
	listenGen int64
	idleSince time.Time
	// notified: a drain waits for this marker; it is not kept idle.
	notified bool
	flights  map[*sharedPermit]struct{}
}

type opKind int

const (
	opMark   opKind = iota // (try-lock and) read the fence row
	opUnlock               // release a shared lock
	opPing                 // keep the session alive
)

type op struct {
	kind     opKind
	e        *entry
	lock     bool // opMark: try the lock first
	key      int64
	resource string
	// scope: the keys whose fence and below rows the pipeline's read
	// also returns for this write (a hierarchical write's own key and the
	// collections above it, AdmitTree); none for a key alone.
	scope []string
	w     gateway.Write
	start time.Time
	done  chan struct{}

	// listenGen is the drain listener's generation when the pipeline
	// carrying the op was sent.
	listenGen int64

	// Results.
	locked  bool
	m       marked
	err     error
	scanned bool
}

// marked is what mark found out for one write.
type marked struct {
	permit  *sharedPermit
	exists  bool
	highest int64
	ready   bool
	gone    <-chan struct{} // wait for this session's older marker to end
	// rows: the rows of the op's scope, read with the fence row (shared by
	// the pipeline's writes: read only).
	rows map[string]sharedfence.Row
}

// session returns the live session, waiting up to acquireTimeout for one.
func (l *lane) session(ctx context.Context, resource string) (*session, error) {
	t := time.NewTimer(l.f.acquireTimeout)
	defer t.Stop()
	for {
		l.mu.Lock()
		s, up, lastErr := l.sess, l.up, l.lastErr
		l.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-up:
		case <-t.C:
			err := errors.New("no marker session to the database is up")
			if lastErr != nil {
				err = fmt.Errorf("%w: %w", err, lastErr)
			}
			return nil, fencegate.Unavailable(resource, err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.f.closing:
			return nil, fencegate.Unavailable(resource, errors.New("fence closed"))
		}
	}
}

// mark takes (or joins) this replica's marker of w.Resource and reads the
// fence row after it is held, and the rows of scope (fence and below) in
// the same statement: one round trip. The write is admitted if the lock is
// held and the row says w.Token is the highest and ready (a hierarchical
// write is then decided on the rows of its scope, AdmitTree).
func (l *lane) mark(ctx context.Context, w gateway.Write, key int64, scope []string) (marked, error) {
	s, err := l.session(ctx, w.Resource)
	if err != nil {
		return marked{}, err
	}
	l.mu.Lock()
	if s.lost {
		l.mu.Unlock()
		return marked{}, fencegate.Unavailable(w.Resource, errors.New("marker session lost"))
	}
	o := &op{kind: opMark, key: key, resource: w.Resource, scope: scope, w: w, start: time.Now(), done: make(chan struct{})}
	switch e := s.entries[key]; {
	case e != nil && w.Token < e.highest:
		// The fence stood above w.Token already: stale, no I/O.
		m := marked{exists: true, highest: e.highest}
		l.mu.Unlock()
		return m, nil
	case e != nil && !e.closed && e.token == w.Token:
		if e.count == 0 {
			delete(s.idle, key)
		}
		e.count++
		o.e = e
	case e != nil && !e.closed && w.Token > e.token:
		// An advance: made on the pool, then the marker is taken again.
		// An idle marker of the older token goes now: the drain waits for it.
		if e.count == 0 {
			e.closed = true
			s.drop(e)
		}
		m := marked{exists: true, highest: e.token, ready: true}
		l.mu.Unlock()
		return m, nil
	case e != nil:
		// This session still holds the marker of an older decision.
		m := marked{gone: e.gone}
		l.mu.Unlock()
		return m, nil
	default:
		e = &entry{key: key, token: w.Token, count: 1, gone: make(chan struct{}), flights: map[*sharedPermit]struct{}{}}
		s.entries[key] = e
		o.e, o.lock = e, true
	}
	s.enqueue(o)
	l.mu.Unlock()
	l.f.waited.Add(1)
	<-o.done // bounded: every pipeline has the store timeout
	return o.m, o.err
}

// superseded closes this replica's marker of key to writers once the fence
// stands at highest: writers of older tokens are refused without I/O, and
// writers of highest wait for the marker to end before taking their own.
func (l *lane) superseded(key, highest int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sess; s != nil {
		if e := s.entries[key]; e != nil && e.token < highest {
			e.closed = true
			e.highest = max(e.highest, highest)
			if e.count == 0 {
				s.drop(e)
			}
		}
	}
}

// drained lets this replica's marker of key go because a drain of token
// (by any replica) waits for it: an idle one at once, a busy one when its
// last write ends. Writers still join a busy one: their reads decide them
// (a drained fence is not ready, so they are refused or wait). A marker of
// token or newer stays: it was read ready at a fence at or above token, so
// that drain has nothing left to wait for (it locks only a fence not
// ready); the notification of the drain's own replica arrives after the
// drain, when the marker taken again for its write may already be idle.
func (l *lane) drained(key, token int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sess; s != nil {
		if e := s.entries[key]; e != nil && e.token < token {
			e.notified = true
			if e.count == 0 {
				s.drop(e)
			}
		}
	}
}

// dropIdle lets go every idle marker of the lane's session, or only those
// idle since before cutoff if cutoff is not zero.
func (l *lane) dropIdle(cutoff time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sess; s != nil {
		s.dropIdle(cutoff)
	}
}

// dropIdle: see lane.dropIdle. Called with l.mu held.
func (s *session) dropIdle(cutoff time.Time) {
	for _, e := range s.idle {
		if cutoff.IsZero() || e.idleSince.Before(cutoff) {
			s.drop(e)
		}
	}
}

// enqueue hands o to the worker. Called with l.mu held.
func (s *session) enqueue(o *op) {
	s.queue = append(s.queue, o)
	if o.kind == opUnlock {
		if s.unlocksSince.IsZero() {
			s.unlocksSince = time.Now()
		}
	} else {
		if s.marks == 0 {
			s.marksSince = time.Now()
		}
		s.marks++
	}
	s.wakeUp()
}

func (s *session) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// release drops one writer from e. The last one keeps the marker idle if
// it may stay (docs/design.md §4, sticky markers), else releases the lock
// (after the write, off the critical path: the unlock goes out with the
// next pipeline). Called with l.mu held.
func (s *session) release(e *entry) {
	e.count--
	if e.count > 0 {
		return
	}
	gen := s.l.f.listenGen.Load()
	if e.held && !e.closed && !e.notified && !s.lost && gen%2 == 1 && e.listenGen == gen && len(s.idle) < maxIdle && s.entries[e.key] == e {
		e.idleSince = time.Now()
		s.idle[e.key] = e
		return
	}
	s.drop(e)
}

// drop ends e: no writer holds it any more. Called with l.mu held.
func (s *session) drop(e *entry) {
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
	if s.idle[e.key] == e {
		delete(s.idle, e.key)
	}
	e.end()
	if e.held && !s.lost {
		e.held = false
		s.enqueue(&op{kind: opUnlock, key: e.key, start: time.Now(), done: make(chan struct{})})
	}
}

// end wakes the writers waiting for e to end. Called with l.mu held.
func (e *entry) end() {
	if !e.ended {
		e.ended = true
		close(e.gone)
	}
}

// reconnectMax caps the wait between two tries to open a marker session
// (a refused connection to a database that is down costs little).
const reconnectMax = 250 * time.Millisecond

// run keeps a marker session up until the fence is closed.
func (l *lane) run() {
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-l.f.closing:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.f.storeTimeout)
		s, err := l.connect(ctx)
		cancel()
		if err != nil {
			l.mu.Lock()
			first := l.lastErr == nil
			l.lastErr = err
			l.mu.Unlock()
			if errors.Is(err, ErrPoolMode) {
				// Latched, and the lane stays down: a check that passes on a
				// later try could be luck (which server the pooler hands
				// out), never proof. Fixing the pooler takes a restart.
				l.f.poolMode.Store(true)
				l.f.log.Error("marker session refused: the database is reached through a pooler that does not keep sessions; shared mode admits no write until restarted", "err", err)
				return
			}
			if first {
				l.f.log.Warn("marker session to the database not up", "err", err)
			}
			select {
			case <-l.f.closing:
				return
			case <-time.After(backoff):
			}
			// At most reconnectMax between tries: writes wait up to the
			// acquire timeout (1s) for a session, and a database that
			// returns (a restart, a failover) must find the replica
			// serving within that.
			backoff = min(2*backoff, reconnectMax)
			continue
		}
		backoff = 50 * time.Millisecond
		l.mu.Lock()
		l.sess, l.lastErr = s, nil
		close(l.up)
		l.mu.Unlock()
		s.work()
	}
}

// connect opens and registers a marker session. The order matters for the
// drain's check: the liveness lock is held before the registration is
// visible, so a registered session whose lock is gone has ended.
func (l *lane) connect(ctx context.Context) (*session, error) {
	f := l.f
	conn, err := pgx.ConnectConfig(ctx, f.connConfig.Copy())
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close(context.Background())
		}
	}()
	if err := checkOwnSession(ctx, conn, f.pool); err != nil {
		return nil, err
	}
	var id, pid int32
	f.roundTrips.Add(1)
	if err := conn.QueryRow(ctx, `SELECT nextval('fence_session_id_seq')::int, pg_backend_pid()`).Scan(&id, &pid); err != nil {
		return nil, fmt.Errorf("marker session: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(sessionBeginSQL)
	b.Queue(sessionSettingsSQL, ms(markerIdleTimeout), ms(f.storeTimeout))
	b.Queue(sessionLockSQL, id)
	f.roundTrips.Add(1)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("marker session: %w", err)
	}
	// Registered with a WAL flush (the pool's synchronous_commit): a
	// registration lost in a crash would hide the session from drains.
	rb := &pgx.Batch{}
	rb.Queue(sessionSweepSQL)
	rb.Queue(sessionNoticeSQL)
	rb.Queue(sessionRegisterSQL, id, f.replica, pid, f.forwardTimeout.Seconds())
	f.roundTrips.Add(1)
	if err := f.pool.SendBatch(ctx, rb).Close(); err != nil {
		return nil, fmt.Errorf("register marker session: %w", err)
	}
	ok = true
	return &session{l: l, id: id, conn: conn, entries: map[int64]*entry{}, idle: map[int64]*entry{}, wake: make(chan struct{}, 1)}, nil
}

// checkOwnSession fails with ErrPoolMode if conn does not keep one server
// session between transactions (a pooler in transaction or statement
// mode): while another client is in a transaction, conn's backend must
// neither be that client's nor change, and conn's session must keep a
// setting of its own that no other client sees.
//
// A client cannot ask the pooler which server it holds, so the check is a
// probe, repeated: one round can be fooled when other clients of the
// pooler (the store's own pool at start, other replicas) take conn's
// server while the pool's transaction runs and give it back before conn's
// next statement. So conn's backend must also stay the same over
// sessionProbeRounds rounds: each round ends by releasing the pool's
// server just after conn's, and a pooler that shares servers (PgBouncer
// hands out the most recently released first) then gives conn the other
// server in the next round; without other clients the first round
// already lands the pool's transaction on conn's server. A pooler in
// session mode resets a server before another client gets it
// (server_reset_query, PgBouncer's default DISCARD ALL), so the setting
// never leaks there.
func checkOwnSession(ctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool) error {
	var first int32
	for round := range sessionProbeRounds {
		pid, err := probeOwnSession(ctx, conn, pool)
		if err != nil {
			return err
		}
		if round == 0 {
			first = pid
		} else if pid != first {
			return ErrPoolMode
		}
	}
	return nil
}

// sessionProbeRounds is how many rounds checkOwnSession runs: each costs
// five round trips (two on conn, three on the pool), once per marker
// session opened. Behind a pooler in
// transaction mode with six other clients hammering it, one round was
// fooled in about 1 of 300 checks, and a serve in CI started that way
// once; rounds after the first also catch conn's backend changing.
const sessionProbeRounds = 8

// probeOwnSession is one round of checkOwnSession; it returns conn's
// backend pid.
func probeOwnSession(ctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool) (int32, error) {
	// The simple protocol: a pooler in transaction mode mixes up prepared
	// statements, which would hide the answer behind another error.
	simple := pgx.QueryExecModeSimpleProtocol
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return 0, err
	}
	mine := hex.EncodeToString(nonce[:])
	var p1, p2, p3 int32
	var seen2, seen3 string
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), set_config('fencegate.session_probe', $1, false)", simple, mine).Scan(&p1, &seen3); err != nil {
		return 0, fmt.Errorf("marker session: %w", err)
	}
	const probeSQL = "SELECT pg_backend_pid(), coalesce(current_setting('fencegate.session_probe', true), '')"
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("marker session: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := tx.QueryRow(ctx, probeSQL, simple).Scan(&p2, &seen2); err != nil {
		return 0, fmt.Errorf("marker session: %w", err)
	}
	if err := conn.QueryRow(ctx, probeSQL, simple).Scan(&p3, &seen3); err != nil {
		return 0, fmt.Errorf("marker session: %w", err)
	}
	if p1 == p2 || p1 != p3 || seen2 != "" || seen3 != mine {
		return 0, ErrPoolMode
	}
	return p1, nil
}

// CheckSessionPooling reports ErrPoolMode if the database at url is
// reached through a pooler that does not give each client connection a
// server session of its own (fencegate doctor; the shared fence checks each
// marker session it opens).
func CheckSessionPooling(ctx context.Context, url string) error {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("postgres url: %w", err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return checkOwnSession(ctx, conn, pool)
}

// work sends the session's queued statements, one pipeline at a time, until
// the session is lost or the fence closed.
func (s *session) work() {
	l, f := s.l, s.l.f
	tick := time.NewTicker(min(f.markerIdle, time.Second) / 4)
	defer tick.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	last := time.Now()
	for {
		swept := false
		select {
		case <-s.wake:
		case <-tick.C:
			swept = true
		case <-f.closing:
		}
		l.mu.Lock()
		if swept {
			s.dropIdle(time.Now().Add(-f.markerIdle))
		}
		closing := false
		select {
		case <-f.closing:
			closing = true
		default:
		}
		// Unlocks alone wait up to unlockLinger for a marker to go out
		// with: they are off every write's critical path, and a pipeline
		// saved is a round trip saved on both ends. Marks of a busy
		// session wait up to markerLinger for company: under concurrent
		// writes a statement then serves many (the database's work per
		// write); a quiet session's write goes at once.
		wait := time.Duration(0)
		switch {
		case closing || len(s.queue) == 0 || len(s.queue) >= maxBatch:
		case s.marks == 0:
			wait = unlockLinger - time.Since(s.unlocksSince)
		case s.busy && s.marks < lingerMarks && time.Since(s.lastSend) < 10*f.markerLinger:
			wait = f.markerLinger - time.Since(s.marksSince)
		}
		if wait > 0 {
			l.mu.Unlock()
			linger.Reset(wait)
			select {
			case <-s.wake:
			case <-linger.C:
			case <-f.closing:
			}
			linger.Stop()
			s.wakeUp() // look at the queue again
			continue
		}
		ops := s.queue
		if len(ops) > maxBatch {
			ops, s.queue = ops[:maxBatch:maxBatch], append([]*op(nil), ops[maxBatch:]...)
			s.marks, s.unlocksSince, s.marksSince = 0, time.Time{}, time.Time{}
			for _, o := range s.queue {
				if o.kind == opUnlock {
					if s.unlocksSince.IsZero() {
						s.unlocksSince = o.start
					}
				} else {
					if s.marks == 0 {
						s.marksSince = o.start
					}
					s.marks++
				}
			}
			s.wakeUp()
		} else {
			s.queue = nil
			s.marks, s.unlocksSince, s.marksSince = 0, time.Time{}, time.Time{}
		}
		if len(ops) > 0 {
			marks := 0
			for _, o := range ops {
				if o.kind == opMark {
					marks++
				}
			}
			s.busy, s.lastSend = marks > 1, time.Now()
		}
		inflight := 0
		if closing {
			for _, e := range s.entries {
				inflight += len(e.flights)
			}
		}
		l.mu.Unlock()
		if closing && len(ops) == 0 {
			s.close(inflight == 0)
			return
		}
		if len(ops) == 0 {
			if time.Since(last) < heartbeatEvery {
				continue
			}
			ops = []*op{{kind: opPing}}
		}
		last = time.Now()
		if err := s.send(ops); err != nil {
			s.lose(err, ops)
			return
		}
		s.apply(ops)
	}
}

// send runs ops as one pipeline of at most three statements (unlocks,
// try-locks, then the fresh read of every resource and of every key of the
// ops' scopes: docs/design.md §4) and scans their results into them.
func (s *session) send(ops []*op) error {
	f := s.l.f
	var unlocks, locks []int64
	var resources []string
	seen := map[string]bool{}
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			resources = append(resources, r)
		}
	}
	scoped := false
	for _, o := range ops {
		switch o.kind {
		case opMark:
			if o.lock {
				locks = append(locks, o.key)
			}
			add(o.resource)
			for _, k := range o.scope {
				add(k)
			}
			scoped = scoped || len(o.scope) > 0
		case opUnlock:
			unlocks = append(unlocks, o.key)
		}
	}
	b := &pgx.Batch{}
	if len(unlocks) > 0 {
		b.Queue(markerUnlockSQL, unlocks)
	}
	if len(locks) > 0 {
		b.Queue(markerTrySQL, locks)
	}
	if len(resources) > 0 {
		// A hierarchical write's collections are read by the same
		// statement as its own row, after its marker is held
		// (markerScopeReadSQL); a pipeline of keys alone reads their
		// fence rows only.
		if scoped {
			b.Queue(markerScopeReadSQL, resources)
		} else {
			b.Queue(markerReadSQL, resources)
		}
	}
	if b.Len() == 0 {
		b.Queue("SELECT 1")
	}
	gen := f.listenGen.Load()
	for _, o := range ops {
		o.listenGen = gen
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
	defer cancel()
	f.roundTrips.Add(1)
	f.statements.Add(int64(b.Len()))
	br := s.conn.SendBatch(ctx, b)
	fail := func(err error) error {
		br.Close()
		return err
	}
	if len(unlocks) > 0 {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	granted := make(map[int64]bool, len(locks))
	if len(locks) > 0 {
		rows, err := br.Query()
		if err != nil {
			return fail(err)
		}
		for rows.Next() {
			var k int64
			var ok bool
			if err := rows.Scan(&k, &ok); err != nil {
				rows.Close()
				return fail(err)
			}
			granted[k] = ok
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		if len(granted) != len(locks) {
			return fail(fmt.Errorf("marker try-lock answered %d of %d keys", len(granted), len(locks)))
		}
	}
	read := make(map[string]sharedfence.Row, len(resources))
	if len(resources) > 0 {
		rows, err := br.Query()
		if err != nil {
			return fail(err)
		}
		for rows.Next() {
			var r string
			v := sharedfence.Row{Exists: true}
			if scoped {
				err = rows.Scan(&r, &v.Exists, &v.Highest, &v.Ready, &v.Below, &v.BelowReady, &v.Known)
			} else {
				err = rows.Scan(&r, &v.Highest, &v.Ready)
			}
			if err != nil {
				rows.Close()
				return fail(err)
			}
			read[r] = v
		}
		if err := rows.Err(); err != nil {
			return fail(err)
		}
	}
	if b.Len() == 1 && len(unlocks)+len(locks)+len(resources) == 0 {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	for _, o := range ops {
		if o.kind == opMark {
			if o.lock {
				o.locked = granted[o.key]
			}
			v := read[o.resource]
			o.m.exists, o.m.highest, o.m.ready = v.Exists, v.Highest, v.Ready
			if len(o.scope) > 0 {
				o.m.rows = read
			}
		}
		o.scanned = true
	}
	return br.Close()
}

// apply makes the decisions of a pipeline that went through, in order, and
// wakes the writers.
func (s *session) apply(ops []*op) {
	l, f := s.l, s.l.f
	l.mu.Lock()
	for _, o := range ops {
		if o.kind != opMark {
			continue
		}
		e := o.e
		if o.lock {
			e.held = o.locked
			if !o.locked {
				// A drain holds or waits for the exclusive lock.
				e.closed = true
			}
		}
		if o.m.exists {
			e.highest = max(e.highest, o.m.highest)
		}
		// The listener's generation before this read: the marker may stay
		// idle only if a drain's notification sent after the read reaches
		// this replica (docs/design.md §4).
		e.listenGen = o.listenGen
		if e.held && !s.lost && o.m.exists && o.m.highest == e.token && o.m.ready {
			p := &sharedPermit{s: s, e: e, token: e.token, rows: o.m.rows, Flight: sharedfence.Flight{
				Resource: o.resource, Abort: o.w.Abort, BodySent: o.w.BodySent, Start: o.start}}
			e.flights[p] = struct{}{}
			// The forward must end within the forward timeout counted from
			// before the marker was read: a drain that finds this session
			// gone waits that long (docs/design.md §4).
			p.Arm(f.forwardTimeout)
			o.m.permit = p
			continue
		}
		if !(o.m.exists && o.m.highest == e.token && o.m.ready) {
			e.closed = true
		}
		s.release(e)
	}
	l.mu.Unlock()
	for _, o := range ops {
		if o.done != nil {
			close(o.done)
		}
	}
}

// lose ends a session that failed: its markers are gone (or will be when
// the database notices), so its writes in flight are aborted and every
// drain waits their forward timeout (docs/design.md §4).
func (s *session) lose(err error, ops []*op) {
	l, f := s.l, s.l.f
	l.mu.Lock()
	s.lost = true
	if l.sess == s {
		l.sess = nil
		l.up = make(chan struct{})
		l.lastErr = err
	}
	ops = append(ops, s.queue...)
	s.queue = nil
	var aborts []*sharedPermit
	n := 0
	for _, e := range s.entries {
		e.end() // writers waiting for it go to the next session
		for p := range e.flights {
			n++
			aborts = append(aborts, p)
			// A write whose request went out whole may be applied by the
			// upstream whatever becomes of its connection: aborting it does
			// not end it before its forward bound (recovery_shared.go).
			if end := p.MayLandUntil(f.forwardTimeout); end.After(s.lostUntil) {
				s.lostUntil = end
			}
		}
	}
	for _, o := range ops {
		if o.kind == opMark {
			s.release(o.e)
		}
		o.err = fencegate.Unavailable(o.resource, fmt.Errorf("marker session lost: %w", err))
	}
	s.lostLeft = n
	until := s.lostUntil
	l.mu.Unlock()
	if n == 0 {
		// Nothing of it in flight: drains need not wait for it.
		f.forget(s.id, until)
	}
	f.log.Warn("marker session to the database lost; aborting its writes in flight", "session", s.id, "writes", n, "err", err)
	for _, p := range aborts {
		p.Lost(err)
	}
	for _, o := range ops {
		if o.done != nil {
			close(o.done)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	s.conn.Close(ctx)
	cancel()
}

// close ends a session at shutdown; one with no write in flight
// unregisters first, so drains need not wait for it.
func (s *session) close(idle bool) {
	l, f := s.l, s.l.f
	l.mu.Lock()
	s.lost = true
	if l.sess == s {
		l.sess = nil
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
	defer cancel()
	if idle {
		if _, err := f.pool.Exec(ctx, sessionUnregisterSQL, s.id); err != nil {
			f.log.Warn("unregister marker session", "session", s.id, "err", err)
		}
	}
	s.conn.Close(ctx)
}

// sharedPermit is a write in flight: it holds its entry's marker.
type sharedPermit struct {
	s     *session
	e     *entry
	token int64
	// rows are the rows of the write's scope its marker's read returned
	// (marked.rows), which AdmitTree decides it on and then drops.
	rows map[string]sharedfence.Row
	// Flight bounds the write's forward from when its marker read was
	// queued.
	sharedfence.Flight
	once sync.Once
}

// Release implements gateway.Permit. It does no I/O: the last writer's
// unlock goes out with the session's next pipeline.
func (p *sharedPermit) Release() {
	p.once.Do(func() {
		p.Stop()
		l := p.s.l
		l.mu.Lock()
		delete(p.e.flights, p)
		p.s.release(p.e)
		last := false
		if p.s.lost && p.s.lostLeft > 0 {
			p.s.lostLeft--
			last = p.s.lostLeft == 0
		}
		until := p.s.lostUntil
		l.mu.Unlock()
		if last {
			// The last write of a lost session ended (or was cut short
			// before its request went out whole): once the forward bound
			// of those that went out has passed, nothing of it can land.
			l.f.forget(p.s.id, until)
		}
	})
}
