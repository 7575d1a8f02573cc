package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ReleaseChannel is the NOTIFY channel a release announces its resource on,
// so that acquirers waiting in any process retry at once.
const ReleaseChannel = "fencegate_lease_released"

// Leases is the coordinator's backend on PostgreSQL: one row per resource in
// resource_fence (migration 010), tokens from resource_fence_token_seq.
// Every change is one statement, its own transaction and one round trip (a
// release is followed by a notification, see notifySQL), and every time
// comes from the database's clock_timestamp(), never from a worker or from
// this process.
type Leases struct {
	st *Store
	// RaiseFence makes a fresh acquisition raise the resource's fence row
	// (the shared fence's record) to the new token in the same statement,
	// so in the same transaction and commit as the issuance (acquireRaiseSQL):
	// fence on issuance in one round trip, and atomic (no lease without its
	// raise). Set before first use. The server sets it in shared fence mode,
	// where that row is the whole fence; a local fence keeps a cache that a
	// raise made only in the row would bypass, so it raises through its own
	// Advance (coordinator.Service.OnIssue) instead.
	RaiseFence bool

	once     sync.Once
	renews   batcher // group commit of Renew (lease_batch.go)
	releases batcher // and of Release
}

var (
	_ coordinator.Backend        = (*Leases)(nil)
	_ coordinator.ReleaseWatcher = (*Leases)(nil)
)

// NewLeases returns the lease backend on st.
func NewLeases(st *Store) *Leases { return &Leases{st: st} }

const (
	// acquireSQL takes the lease if the row is new, expired or already the
	// caller's. The token is drawn with nextval in the same statement, so
	// in the same transaction as the takeover: if the statement fails, the
	// drawn number is a gap that no row ever carries. ON CONFLICT DO
	// UPDATE locks the existing row and evaluates WHERE on its newest
	// version (READ COMMITTED), so two acquirers racing for an expired
	// lease serialize and the second sees the first's lease: never two
	// live holders. The holder re-acquiring keeps its token; renewal never
	// changes it either. Zero rows means held by someone else.
	//
	// A takeover draws its token in SET, after the row lock is granted,
	// not the value VALUES drew before waiting for the lock: that one may
	// be older than a token another takeover drew and committed meanwhile
	// (found by the concurrency test; the guard trigger refused the
	// decrease). The VALUES draw is then a gap. currval is the
	// session's last draw, so it tells a new token from a kept one.
	acquireSQL = `INSERT INTO resource_fence AS f (resource_id, highest_token, owner_id, lease_expires_at, updated_at)
VALUES ($1, nextval('resource_fence_token_seq'), $2, clock_timestamp() + $3::bigint * interval '1 microsecond', clock_timestamp())
ON CONFLICT (resource_id) DO UPDATE SET
  highest_token = CASE WHEN f.owner_id = excluded.owner_id AND f.lease_expires_at > clock_timestamp()
                       THEN f.highest_token ELSE nextval('resource_fence_token_seq') END,
  owner_id = excluded.owner_id,
  lease_expires_at = excluded.lease_expires_at,
  updated_at = excluded.updated_at
WHERE f.lease_expires_at <= clock_timestamp() OR f.owner_id = excluded.owner_id
RETURNING highest_token AS token, lease_expires_at AS expires_at, clock_timestamp() AS db_now,
  highest_token = currval('resource_fence_token_seq') AS fresh`

	// acquireRaiseSQL is acquireSQL and, when it issued a new token, the
	// fence's advance (advanceSQL, $1 resource, the token, $2 owner) as one
	// statement: one round trip and one commit (WAL flush, synchronous_commit
	// is on for the pool: Open) for both. The fence row is raised only if it
	// stands below the token (never lowered; the guard trigger refuses a
	// decrease too), and only for a fresh token (a holder's retried acquire
	// keeps its token and raises nothing). Locks are taken in the order
	// resource_fence row, then fence row, as every other transaction that
	// takes both does (fence reset: table lock on resource_fence first).
	acquireRaiseSQL = `WITH l AS (` + acquireSQL + `),
r AS (INSERT INTO fence AS f (resource, highest, ready, owner)
  SELECT $1, l.token, true, $2 FROM l WHERE l.fresh
  ON CONFLICT (resource) DO UPDATE
     SET highest = EXCLUDED.highest, ready = false, owner = EXCLUDED.owner, updated_at = clock_timestamp()
   WHERE f.highest < EXCLUDED.highest
  RETURNING highest)
SELECT l.token, l.expires_at, l.db_now, l.fresh FROM l`

	renewSQL = `UPDATE resource_fence
SET lease_expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond', updated_at = clock_timestamp()
WHERE resource_id = $1 AND owner_id = $2 AND highest_token = $3 AND lease_expires_at > clock_timestamp()
RETURNING lease_expires_at AS expires_at, clock_timestamp() AS db_now`

	// releaseSQL ends the lease now; one row affected means released.
	releaseSQL = `UPDATE resource_fence SET lease_expires_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE resource_id = $1 AND owner_id = $2 AND highest_token = $3 AND lease_expires_at > clock_timestamp()`

	// notifySQL wakes waiters in every process after a release committed.
	// It is its own transaction on purpose: PostgreSQL serializes the
	// commits of transactions that NOTIFY (a database-wide lock held
	// through the commit's WAL flush), which in the release's transaction
	// defeated group commit and capped acquire+release at one fsync per
	// op (about 200/s here). Alone it writes no WAL and holds the lock
	// only for a moment. A notification lost to a crash between the two
	// costs a waiter only the wait until the lease's expiry.
	//
	// It notifies only if the lease is free when it runs (a release that
	// found nothing to end wakes nobody). It is sent in the same pipeline
	// as the release, after it (Release).
	notifySQL = `SELECT pg_notify('` + ReleaseChannel + `', $1::text) FROM resource_fence
WHERE resource_id = $1 AND lease_expires_at <= clock_timestamp()`

	showSQL = `SELECT owner_id, highest_token, lease_expires_at, clock_timestamp() FROM resource_fence WHERE resource_id = $1`
)

// AcquireSQL ($1 resource, $2 owner, $3 ttl in µs; AcquireRaiseSQL the
// same), RenewSQL ($1 resource,
// $2 owner, $3 token, $4 ttl in µs), ReleaseSQL ($1 resource, $2 owner,
// $3 token) and NotifySQL ($1 resource, after a release) are the statements
// the backend runs, exported for bench/cmd/leasebench, which runs the same
// SQL under pgbench.
const (
	AcquireSQL      = acquireSQL
	AcquireRaiseSQL = acquireRaiseSQL // acquireSQL with the fence's raise (RaiseFence)
	// AdvanceSQL ($1 resource, $2 token, $3 owner) and DurableSQL are the
	// fence's advance (Store.AdvanceFence runs BEGIN, DurableSQL,
	// AdvanceSQL, COMMIT in one pipeline).
	AdvanceSQL = advanceSQL
	DurableSQL = durableSQL
	RenewSQL   = renewSQL
	ReleaseSQL = releaseSQL
	NotifySQL  = notifySQL
)

func (ls *Leases) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, ls.st.Timeout)
}

// Acquire implements coordinator.Backend.
func (ls *Leases) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (coordinator.Lease, bool, error) {
	g := ls.st.guard
	if err := g.Err(resource); err != nil {
		return coordinator.Lease{}, false, err
	}
	start := g.issueStart()
	ctx, cancel := ls.timeout(ctx)
	defer cancel()
	// A held lease may be released between the failed takeover and the
	// read of its holder; then try again, a few times (every retry means
	// another owner made progress), and then report it held: it was, at
	// every attempt. A waiting caller retries at once (Remaining <= 0).
	var cur coordinator.Lease
	sql := acquireSQL
	if ls.RaiseFence {
		sql = acquireRaiseSQL
	}
	for range 5 {
		var (
			l     = coordinator.Lease{Resource: resource, Owner: owner}
			dbNow time.Time
			fresh bool
		)
		err := ls.st.Pool.QueryRow(ctx, sql, resource, owner, ttl.Microseconds()).
			Scan(&l.Token, &l.ExpiresAt, &dbNow, &fresh)
		if err == nil {
			// The statement may have run on a connection opened just now
			// to a promoted standby: the guard checked it before its first
			// use, so look again before handing the token out.
			if err := g.Err(resource); err != nil {
				return coordinator.Lease{}, false, err
			}
			if fresh {
				// The token is committed; one not above every token this
				// process issued before means the store went back (I5).
				if err := g.issued(start, l.Token, resource); err != nil {
					return coordinator.Lease{}, false, err
				}
			}
			l.Remaining = l.ExpiresAt.Sub(dbNow)
			return l, fresh, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return coordinator.Lease{}, false, fmt.Errorf("acquire lease %q: %w", resource, err)
		}
		if cur, err = ls.lease(ctx, resource); err != nil {
			return coordinator.Lease{}, false, err
		}
		if cur.Held() && cur.Owner != owner {
			break
		}
	}
	return cur, false, coordinator.ErrHeld
}

// Renew implements coordinator.Backend. Renewals arriving together are
// sent as one statement (lease_batch.go); each gets its own answer.
func (ls *Leases) Renew(ctx context.Context, resource, owner string, token int64, ttl time.Duration) (coordinator.Lease, error) {
	ls.init()
	op := &leaseOp{resource: resource, owner: owner, token: token, ttl: ttl}
	if err := ls.renews.do(ctx, op, "renew"); err != nil {
		return coordinator.Lease{}, err
	}
	return op.lease, nil
}

// Release implements coordinator.Backend. The release and the
// notification are two transactions (see notifySQL) in one pipeline: one
// round trip. The notification runs after the release has committed and
// is sent only if the lease is free then. Releases arriving together are
// sent as one batch (lease_batch.go); each gets its own answer.
func (ls *Leases) Release(ctx context.Context, resource, owner string, token int64) (bool, error) {
	ls.init()
	op := &leaseOp{resource: resource, owner: owner, token: token}
	if err := ls.releases.do(ctx, op, "release"); err != nil {
		return false, err
	}
	return op.released, nil
}

// releaseOne is one release and its notification (releaseSQL, notifySQL).
func (ls *Leases) releaseOne(ctx context.Context, resource, owner string, token int64) (bool, error) {
	c, err := ls.st.Pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", resource, err)
	}
	defer c.Release()
	rel, err := c.Conn().Prepare(ctx, "fencegate_lease_release", releaseSQL)
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", resource, err)
	}
	ntf, err := c.Conn().Prepare(ctx, "fencegate_lease_notify", notifySQL)
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", resource, err)
	}
	res := []byte(resource)
	p := c.Conn().PgConn().StartPipeline(ctx)
	p.SendQueryStatement(rel, [][]byte{res, []byte(owner), strconv.AppendInt(nil, token, 10)}, nil, nil)
	p.SendPipelineSync()
	p.SendQueryStatement(ntf, [][]byte{res}, nil, nil)
	p.SendPipelineSync()
	released, err := false, p.Flush()
	if err == nil {
		released, err = releaseResults(p)
	}
	if cerr := p.Close(); err == nil && cerr != nil && !released {
		err = cerr
	}
	if err != nil && !released {
		return false, fmt.Errorf("release lease %q: %w", resource, err)
	}
	// Released and committed; a failed notification only delays waiters
	// elsewhere until the expiry, so it is not an error.
	return released, nil
}

// releaseResults reads the answers of Release's pipeline: whether the
// release changed a row, and the first error.
func releaseResults(p *pgconn.Pipeline) (bool, error) {
	released := false
	for i := range 4 {
		r, err := p.GetResults()
		if err != nil {
			return released, err
		}
		switch r := r.(type) {
		case *pgconn.ResultReader:
			tag, err := r.Close()
			if err != nil {
				return released, err
			}
			if i == 0 {
				released = tag.RowsAffected() == 1
			}
		case *pgconn.PipelineSync:
		default:
			return released, fmt.Errorf("unexpected pipeline result %T", r)
		}
	}
	return released, nil
}

// Lease implements coordinator.Backend.
func (ls *Leases) Lease(ctx context.Context, resource string) (coordinator.Lease, error) {
	ctx, cancel := ls.timeout(ctx)
	defer cancel()
	return ls.lease(ctx, resource)
}

func (ls *Leases) lease(ctx context.Context, resource string) (coordinator.Lease, error) {
	l := coordinator.Lease{Resource: resource}
	var dbNow time.Time
	err := ls.st.Pool.QueryRow(ctx, showSQL, resource).Scan(&l.Owner, &l.Token, &l.ExpiresAt, &dbNow)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return l, nil
	case err != nil:
		return coordinator.Lease{}, fmt.Errorf("read lease %q: %w", resource, err)
	}
	l.Remaining = l.ExpiresAt.Sub(dbNow)
	return l, nil
}

// Issued returns the highest token issued for resource (0 if none).
func (ls *Leases) Issued(ctx context.Context, resource string) (int64, error) {
	l, err := ls.Lease(ctx, resource)
	return l.Token, err
}

// WatchReleases implements coordinator.ReleaseWatcher with LISTEN on a
// connection of its own (outside the pool: a listening connection cannot
// be shared). When the connection breaks it reconnects with backoff and
// reports "" (releases may have been missed while it was down).
func (ls *Leases) WatchReleases(ctx context.Context, released func(resource string)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		// The error is not reported: the pool's statements report the
		// outage (503) and waiters still wake at the holder's expiry.
		ls.listen(ctx, released, func() { backoff = 100 * time.Millisecond })
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

func (ls *Leases) listen(ctx context.Context, released func(string), connected func()) error {
	cctx, cancel := ls.timeout(ctx)
	conn, err := pgx.ConnectConfig(cctx, ls.st.Pool.Config().ConnConfig.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+ReleaseChannel); err != nil {
		return err
	}
	connected()
	released("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		released(n.Payload)
	}
}

// Active counts the leases live now, by the database's clock (a released
// lease has expired). It scans the lease table: it is meant for a metrics
// scrape, not for the request path.
func (ls *Leases) Active(ctx context.Context) (int, error) {
	ctx, cancel := ls.timeout(ctx)
	defer cancel()
	var n int
	err := ls.st.Pool.QueryRow(ctx, `SELECT count(*) FROM resource_fence WHERE lease_expires_at > clock_timestamp()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count active leases: %w", err)
	}
	return n, nil
}

// lockIssuanceSQL holds off every acquisition until the transaction ends,
// and waits for those in progress (see raiseSequenceSQL): fence reset runs
// its check of the issued tokens and its raise of the sequence under it.
const lockIssuanceSQL = `LOCK TABLE resource_fence IN SHARE ROW EXCLUSIVE MODE`
