package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/jackc/pgx/v5"
)

// MaxListLimit caps one page of a listing, so that a single call holds at
// most this many rows in memory whatever the caller asks for.
const MaxListLimit = 1000

// Keyset pagination: each page is one statement that starts after the last
// key of the previous page, so a listing of any size never holds more than
// a page and never skips or repeats a row that exists throughout (rows are
// never removed or renamed, I7), however the fences advance meanwhile. The
// order is the column's collation, the order of its primary key index;
// pages are contiguous in that order whatever the collation is.
// starts_with filters by prefix (a LIKE pattern would need escaping).
const (
	listFencesSQL = `SELECT resource, highest, ready, owner, etag, updated_at FROM fence
 WHERE ($1 = '' OR starts_with(resource, $1)) AND ($2::text IS NULL OR resource > $2)
 ORDER BY resource LIMIT $3`
	listLeasesSQL = `SELECT resource_id, owner_id, highest_token, lease_expires_at, clock_timestamp() FROM resource_fence
 WHERE ($1 = '' OR starts_with(resource_id, $1)) AND ($2::text IS NULL OR resource_id > $2)
 ORDER BY resource_id LIMIT $3`
)

// ListFences returns up to limit fence records whose resource starts with
// prefix and sorts after after, in the column's order. Pass the last
// resource of a page as after to get the next; a page shorter than limit
// is the last.
func (s *Store) ListFences(ctx context.Context, prefix, after string, limit int) ([]fencegate.FenceState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	rows, err := s.Pool.Query(ctx, listFencesSQL, prefix, nullable(after), pageSize(limit))
	if err != nil {
		return nil, fmt.Errorf("list fences: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fencegate.FenceState, error) {
		var st fencegate.FenceState
		err := row.Scan(&st.Resource, &st.Highest, &st.Ready, &st.Owner, &st.ETag, &st.UpdatedAt)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("list fences: %w", err)
	}
	return out, nil
}

// ListLeases is ListFences for lease records: every resource ever leased
// (a released or expired lease keeps its row, with Remaining <= 0, by the
// database's clock).
func (ls *Leases) ListLeases(ctx context.Context, prefix, after string, limit int) ([]coordinator.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, ls.st.Timeout)
	defer cancel()
	rows, err := ls.st.Pool.Query(ctx, listLeasesSQL, prefix, nullable(after), pageSize(limit))
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (coordinator.Lease, error) {
		var l coordinator.Lease
		var dbNow time.Time
		err := row.Scan(&l.Resource, &l.Owner, &l.Token, &l.ExpiresAt, &dbNow)
		l.Remaining = l.ExpiresAt.Sub(dbNow)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

func pageSize(limit int) int {
	if limit <= 0 || limit > MaxListLimit {
		return MaxListLimit
	}
	return limit
}

// nullable maps "" (from the start) to NULL.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
