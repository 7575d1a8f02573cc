package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the durable record behind a gateway.LocalFence when one gateway
// keeps its fences in PostgreSQL (fence mode "local" on store.postgres): the
// in-memory fast path stays, PostgreSQL only makes the advances durable.
var (
	_ gateway.Store  = (*Store)(nil)
	_ gateway.Pinger = (*Store)(nil)
)

const loadFenceSQL = `SELECT highest, ready, owner, etag, updated_at FROM fence WHERE resource = $1`

// advanceSQL raises a fence, never lowers it (the table's trigger refuses a
// decrease too). A new resource starts ready: nobody can have a write in
// flight under a fence that did not exist. A raised one is not ready until a
// writer of the new token has drained the older in-flight writes (shared
// mode; LocalFence keeps its drain state in memory).
const advanceSQL = `INSERT INTO fence AS f (resource, highest, ready, owner) VALUES ($1, $2, true, $3)
ON CONFLICT (resource) DO UPDATE
   SET highest = EXCLUDED.highest, ready = false, owner = EXCLUDED.owner, updated_at = clock_timestamp()
 WHERE f.highest < EXCLUDED.highest
RETURNING highest, ready, owner, etag, updated_at`

// durableSQL makes the commit of the transaction it runs in wait for the WAL
// flush (invariant I3) even where the server or role defaults to
// synchronous_commit = off. Stronger settings (remote_write, remote_apply)
// are kept as they are.
const durableSQL = `SELECT set_config('synchronous_commit',
  CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, true)`

// queueAdvance appends the advance of resource to token, as a transaction
// of its own committed synchronously, to b.
func queueAdvance(b *pgx.Batch, resource string, token int64, owner string) {
	b.Queue("BEGIN")
	b.Queue(durableSQL)
	b.Queue(advanceSQL, resource, token, owner)
	b.Queue("COMMIT")
}

// LoadFence implements gateway.Store.
func (s *Store) LoadFence(ctx context.Context, resource string) (fencegate.FenceState, error) {
	if err := s.guard.Err(resource); err != nil {
		return fencegate.FenceState{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	st, err := loadFence(ctx, s.Pool, resource)
	if err != nil {
		return st, fmt.Errorf("load fence %s: %w", resource, err)
	}
	return st, nil
}

// loadFence reads resource's fence record; a resource never fenced is a
// ready fence at 0.
func loadFence(ctx context.Context, pool *pgxpool.Pool, resource string) (fencegate.FenceState, error) {
	st, err := scanFence(pool.QueryRow(ctx, loadFenceSQL, resource))
	if errors.Is(err, pgx.ErrNoRows) {
		return fencegate.FenceState{Resource: resource, Ready: true}, nil
	}
	if err != nil {
		return st, err
	}
	st.Resource = resource
	return st, nil
}

// AdvanceFence implements gateway.Store: one round trip, committed with a
// WAL flush before it returns.
func (s *Store) AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error) {
	if err := s.guard.Err(resource); err != nil {
		return fencegate.FenceState{}, err
	}
	if floor := s.guard.Floor(); token <= floor && !gateway.FromTokenSource(ctx) {
		return fencegate.FenceState{}, fencegate.StaleError(resource, token, floor)
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	st, raised, err := advanceFence(ctx, s.Pool, resource, token, owner)
	if err != nil {
		return st, fmt.Errorf("advance fence %s to %d: %w", resource, token, err)
	}
	if err := s.guard.Err(resource); err != nil {
		return fencegate.FenceState{}, err // on a connection to a store found gone back
	}
	if !raised {
		// Already at token or above: report the record as stored.
		return s.LoadFence(ctx, resource)
	}
	st.Resource = resource
	return st, nil
}

// advanceFence raises resource's fence to token in one round trip,
// committed with a WAL flush; raised is false if the fence already stood at
// token or above.
func advanceFence(ctx context.Context, pool *pgxpool.Pool, resource string, token int64, owner string) (st fencegate.FenceState, raised bool, err error) {
	b := &pgx.Batch{}
	queueAdvance(b, resource, token, owner)
	br := pool.SendBatch(ctx, b)
	st, raised, err = readAdvance(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return st, raised, err
}

// readAdvance reads the results of queueAdvance from br; raised is false if
// the fence already stood at token or above.
func readAdvance(br pgx.BatchResults) (st fencegate.FenceState, raised bool, err error) {
	for range 2 { // BEGIN, durableSQL
		if _, err := br.Exec(); err != nil {
			return st, false, err
		}
	}
	st, err = scanFence(br.QueryRow())
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		raised = false
	case err != nil:
		return st, false, err
	default:
		raised = true
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return st, false, err
	}
	return st, raised, nil
}

func scanFence(row pgx.Row) (fencegate.FenceState, error) {
	var st fencegate.FenceState
	var at time.Time
	if err := row.Scan(&st.Highest, &st.Ready, &st.Owner, &st.ETag, &at); err != nil {
		return st, err
	}
	st.UpdatedAt = at
	return st, nil
}
