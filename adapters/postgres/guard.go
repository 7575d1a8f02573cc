package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5/pgconn"
)

// Guard keeps a process from serving a store that went back: an
// asynchronous standby promoted after its primary acknowledged commits it
// never received, or an older backup restored. Such a store has lower
// fences and a lower token sequence than the ones workers and upstreams
// have seen, so zombies pass and tokens are issued twice (I1, I5).
//
// Two independent checks, made on every new connection (before the
// connection is used: a pool that follows a promotion through a multi-host
// URL checks the new primary first) and every second:
//
//   - Promotion: the store records the PostgreSQL timeline it was served on
//     and whether that primary named a synchronous standby (fencegate_meta,
//     migration 070). A new timeline after a primary without one means
//     acknowledged commits may be lost. After a synchronous primary the
//     promotion is taken as it is, unless this process itself saw that
//     timeline without a synchronous standby.
//   - What this process saw: the highest token it issued (its coordinator)
//     or read from the store's issuance records when it verified a write's
//     token (Saw). A sequence below it, or a token issued that is not above
//     every token this process issued before, means the store went back,
//     whatever PostgreSQL says about timelines. The finding is recorded in
//     the store so every process refuses.
//
// While the store is found regressed, Err refuses fenced writes and token
// issuance, and Ping fails (/readyz), until `fencegate fence recover`
// (Store.Recover) raised the token sequence far above anything the old
// primary could have issued and made every older token worthless.
type Guard struct {
	log *slog.Logger
	// armed is set once the schema is there (after Migrate).
	armed atomic.Bool
	// cause is the reason the store is refused, "" while it is served.
	cause atomic.Pointer[string]
	// floor: tokens below it were issued before the last recovery.
	floor       atomic.Int64
	maxIssued   atomic.Int64
	maxAccepted atomic.Int64
	// autoRecover runs the recovery itself when a regression is found
	// (store.postgres.on_regression: recover).
	autoRecover func(ctx context.Context) error
	recovering  atomic.Bool
	// recordFn writes the regressed flag to the store (set by Open).
	recordFn func(ctx context.Context, cause string) error

	mu       sync.Mutex
	asyncTLs map[string]bool // timelines this process saw without a synchronous standby
	status   Replication
}

// Replication is what the last check found out about the primary.
type Replication struct {
	Timeline int64
	// SynchronousStandbyNames is the primary's setting; "" means commits
	// are acknowledged before any standby has them.
	SynchronousStandbyNames string
	// SyncStandbys counts standbys streaming as sync or quorum, -1 if the
	// role may not see pg_stat_replication's sync_state (pg_monitor).
	SyncStandbys int64
	// Standbys counts the walsenders (any role sees the rows).
	Standbys int64
}

// Synchronous reports whether a commit waits for a standby.
func (r Replication) Synchronous() bool { return r.SynchronousStandbyNames != "" }

// Meaning says what the replication setting means for the fence, in one
// sentence for logs and `fencegate doctor`.
func (r Replication) Meaning() string {
	switch {
	case r.Synchronous() && r.SyncStandbys == 0:
		return "synchronous_standby_names is set but no synchronous standby is streaming: commits (every advance and issued token) wait until one is back"
	case r.Synchronous():
		return "commits wait for a synchronous standby: a promotion of that standby loses no advance and no issued token, and the fence keeps serving"
	case r.Standbys > 0:
		return "standbys replicate asynchronously: a failover may lose acknowledged advances and issued tokens; fencegate then refuses to serve until `fencegate fence recover` (docs/recovery.md)"
	default:
		return "no standby: the fence is as durable as this server's disk; a restored backup is refused until `fencegate fence recover`"
	}
}

func newGuard(log *slog.Logger) *Guard {
	if log == nil {
		log = slog.Default()
	}
	return &Guard{log: log, asyncTLs: map[string]bool{}}
}

// Err is nil while the store is served, else the refusal of a write or
// an issuance for resource.
func (g *Guard) Err(resource string) error {
	if g == nil {
		return nil
	}
	if c := g.cause.Load(); c != nil && *c != "" {
		return fencegate.StoreRegressed(resource, *c)
	}
	return nil
}

// Regressed returns why the store is refused, "" if it is served.
func (g *Guard) Regressed() string {
	if c := g.cause.Load(); c != nil {
		return *c
	}
	return ""
}

// Floor returns the token floor of the last recovery (0 if none).
func (g *Guard) Floor() int64 {
	if g == nil {
		return 0
	}
	return g.floor.Load()
}

// Replication returns what the last check found out about replication.
func (g *Guard) Replication() Replication {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status
}

// issueStart returns the highest token this process has issued so far;
// issued(start, token) is called after a fresh token was committed.
func (g *Guard) issueStart() int64 { return g.maxIssued.Load() }

// issued records a token this process issued, and refuses it if it is not
// above every token this process issued before the acquisition started:
// tokens come from one sequence, so that can only mean the store went back.
func (g *Guard) issued(start, token int64, resource string) error {
	if token <= start {
		g.found(fmt.Sprintf("the store issued token %d, but this process had already issued %d", token, start), true)
		return g.Err(resource)
	}
	raise(&g.maxIssued, token)
	return nil
}

// Saw records a token read from the store's issuance records (the
// highest issued for a resource, when a write's token is verified against
// it): a store that did not go back stands at or above it from then on.
// Tokens from other sources (etcd, ZooKeeper, verify_tokens: false) must
// not be passed: they are not drawn from the store's sequence.
func (g *Guard) Saw(token int64) {
	if g != nil {
		raise(&g.maxAccepted, token)
	}
}

func raise(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// found latches cause; record also writes it to the store (best effort, in
// the background: every process then refuses).
func (g *Guard) found(cause string, record bool) {
	g.set(cause)
	if record {
		go g.record(cause)
	}
}

func (g *Guard) record(cause string) {
	if g.recordFn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.recordFn(ctx, cause); err != nil {
		g.log.Warn("could not record in the store that it went back; other processes find out by themselves", "err", err)
	}
}

func (g *Guard) set(cause string) {
	old := g.Regressed()
	if old == cause {
		return
	}
	g.cause.Store(&cause)
	switch {
	case cause != "" && old == "":
		g.log.Error("fence store went back: refusing fenced writes and token issuance until `fencegate fence recover` (docs/recovery.md)",
			"code", fencegate.CodeStoreRegressed, "cause", cause)
		if g.autoRecover != nil && g.recovering.CompareAndSwap(false, true) {
			go func() {
				defer g.recovering.Store(false)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := g.autoRecover(ctx); err != nil {
					g.log.Error("automatic recovery (store.postgres.on_regression: recover) failed; run `fencegate fence recover`", "err", err)
				}
			}()
		}
	case cause == "":
		g.log.Warn("fence store recovered: serving again; tokens issued before the recovery are refused", "token_floor", g.Floor())
	}
}

// snapshotSQL reads, in one round trip, everything a check needs. On a
// standby (pg_is_in_recovery) the timeline is 0: a standby refuses every
// write anyway. The timeline of the current WAL segment's name is the
// server's timeline whatever the role's privileges (pg_control_checkpoint
// needs more, and lags a promotion until the next checkpoint).
const snapshotSQL = `SELECT pg_is_in_recovery(),
  CASE WHEN pg_is_in_recovery() THEN 0
       ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END,
  coalesce((SELECT value FROM fencegate_meta WHERE key = 'timeline'), ''),
  coalesce((SELECT value FROM fencegate_meta WHERE key = 'replication'), ''),
  coalesce((SELECT value FROM fencegate_meta WHERE key = 'regressed'), ''),
  coalesce((SELECT value FROM fencegate_meta WHERE key = 'token_floor'), '0'),
  (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM resource_fence_token_seq),
  current_setting('synchronous_standby_names'),
  CASE WHEN pg_has_role('pg_read_all_stats', 'USAGE')
       THEN (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')) ELSE -1 END,
  (SELECT count(*) FROM pg_stat_replication)`

type snapshot struct {
	inRecovery  bool
	timeline    int64
	metaTL      string
	replication string
	regressed   string
	floor       int64
	seq         int64
	repl        Replication
}

// metaSetSQL upserts one fencegate_meta value ($1 key, $2 value).
const metaSetSQL = `INSERT INTO fencegate_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`

// acceptPromotionSQL moves the served timeline from $1 to $2 unless
// another process already did (or the regressed flag appeared meanwhile).
const acceptPromotionSQL = `UPDATE fencegate_meta SET value = $2 WHERE key = 'timeline' AND value = $1
  AND NOT EXISTS (SELECT 1 FROM fencegate_meta WHERE key = 'regressed')`

func readSnapshot(ctx context.Context, c *pgconn.PgConn) (snapshot, error) {
	var s snapshot
	res := c.ExecParams(ctx, snapshotSQL, nil, nil, nil, nil).Read()
	if res.Err != nil {
		return s, res.Err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 10 {
		return s, errors.New("store guard: unexpected answer")
	}
	r := res.Rows[0]
	str := func(i int) string { return string(r[i]) }
	num := func(i int) int64 { n, _ := strconv.ParseInt(string(r[i]), 10, 64); return n }
	s.inRecovery = str(0) == "t"
	s.timeline = num(1)
	s.metaTL, s.replication, s.regressed = str(2), str(3), str(4)
	s.floor = num(5)
	s.seq = num(6)
	s.repl = Replication{Timeline: s.timeline, SynchronousStandbyNames: str(7), SyncStandbys: num(8), Standbys: num(9)}
	return s, nil
}

func execMeta(ctx context.Context, c *pgconn.PgConn, sql string, args ...string) (int64, error) {
	params := make([][]byte, len(args))
	for i, a := range args {
		params[i] = []byte(a)
	}
	res := c.ExecParams(ctx, sql, params, nil, nil, nil).Read()
	return res.CommandTag.RowsAffected(), res.Err
}

// check looks at the store through c and updates the guard's state.
func (g *Guard) check(ctx context.Context, c *pgconn.PgConn) error {
	if !g.armed.Load() {
		return nil
	}
	// Read before the snapshot: every token counted here was committed
	// before the snapshot's statement started, so a store that did not go
	// back shows a sequence at or above it. Read after, a token issued
	// meanwhile would look lost.
	hw := max(g.maxIssued.Load(), g.maxAccepted.Load())
	s, err := readSnapshot(ctx, c)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42883") {
			return nil // the schema is not there (fencegate migrate has not run)
		}
		return fmt.Errorf("store guard: %w", err)
	}
	if s.inRecovery {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.status = s.repl
	tl := strconv.FormatInt(s.timeline, 10)
	repl := tl + " async"
	if s.repl.Synchronous() {
		repl = tl + " sync"
	} else {
		g.asyncTLs[tl] = true
	}
	cause := s.regressed
	switch {
	case cause != "":
	case s.metaTL == "":
		// The first check on this schema: record where it is served.
		if _, err := execMeta(ctx, c, metaSetSQL, "timeline", tl); err != nil {
			return fmt.Errorf("store guard: %w", err)
		}
		s.metaTL = tl
	case s.metaTL != tl:
		prev := s.metaTL
		if s.replication == prev+" sync" && !g.asyncTLs[prev] && hw <= s.seq {
			n, err := execMeta(ctx, c, acceptPromotionSQL, prev, tl)
			if err != nil {
				return fmt.Errorf("store guard: %w", err)
			}
			if n == 1 {
				g.log.Warn("database promotion: the previous primary replicated synchronously, so no advance or issued token is lost; serving on the new timeline",
					"previous_timeline", prev, "timeline", tl)
			}
			s.metaTL = tl
		} else {
			how := "without a synchronous standby"
			if s.replication == "" {
				how = "with no replication recorded"
			}
			cause = fmt.Sprintf("the database was promoted from timeline %s to %s and the previous primary ran %s: commits it acknowledged may be lost", prev, tl, how)
		}
	}
	if cause == "" {
		if hw > s.seq {
			cause = fmt.Sprintf("the token sequence stands at %d, below token %d this process issued or read", s.seq, hw)
			if _, err := execMeta(ctx, c, metaSetSQL, "regressed", cause); err != nil {
				g.log.Warn("could not record in the store that it went back", "err", err)
			}
		}
	}
	if cause == "" && s.metaTL == tl && s.replication != repl {
		if _, err := execMeta(ctx, c, metaSetSQL, "replication", repl); err != nil {
			return fmt.Errorf("store guard: %w", err)
		}
		if s.replication != "" {
			g.log.Warn("replication of the fence store changed", "was", s.replication, "now", repl, "meaning", s.repl.Meaning())
		}
	}
	g.floor.Store(s.floor)
	g.set(cause)
	return nil
}
