package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

const (
	// issuedForUpdateSQL is the highest token ever issued for $1 (0 if
	// none), read under lockIssuanceSQL.
	issuedForUpdateSQL = `SELECT coalesce((SELECT highest_token FROM resource_fence WHERE resource_id = $1), 0)`
	// resetAllowSQL announces the one decrease the guard trigger lets
	// through (migration 050), for this transaction only.
	resetAllowSQL = `SELECT set_config('fencegate.fence_reset', $1::text || E'\n' || $2::bigint::text, true)`
	// resetFenceSQL lowers the fence. ready = false: in shared mode the
	// first writer of the new highest then drains every marker still held
	// (writes in flight under the old, higher token), as after an advance.
	// The ETag's token is lowered with it (the version it names kept): an
	// ETag is never recorded over a newer token's, so one left at the
	// mistaken token would refuse every record of the new value's writes.
	resetFenceSQL = `UPDATE fence SET highest = $2, ready = false, owner = $3, etag_token = least(etag_token, $2), updated_at = clock_timestamp()
WHERE resource = $1 AND highest > $2
RETURNING highest, ready, owner, etag, updated_at`
)

// ResetFence lowers the fence of resource to `to`: the only path that
// lowers a fence (docs/design.md I7), and only when the coordinator's
// records agree. In one transaction, with every token issuance held off
// (lockIssuanceSQL): the highest token ever issued for resource must be at
// most `to` (else token_out_of_range), the token sequence is raised to `to`
// so every later lease is above it, and the fence row is lowered with the
// guard trigger's one-time permission. A fence at or below `to` is left as
// it is. Committed with a WAL flush before it returns.
func (s *Store) ResetFence(ctx context.Context, resource string, to int64, owner string) (fencegate.FenceState, error) {
	if to <= 0 {
		return fencegate.FenceState{}, fencegate.ErrResetNotPositive
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var st fencegate.FenceState
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, durableSQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, lockIssuanceSQL); err != nil {
			return err
		}
		var issued int64
		if err := tx.QueryRow(ctx, issuedForUpdateSQL, resource).Scan(&issued); err != nil {
			return err
		}
		if to < issued {
			return &fencegate.ResetBelowIssuedError{Resource: resource, To: to, Issued: issued}
		}
		if _, err := tx.Exec(ctx, raiseSequenceSQL, to); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, resetAllowSQL, resource, to); err != nil {
			return err
		}
		var err error
		st, err = scanFence(tx.QueryRow(ctx, resetFenceSQL, resource, to, owner))
		if err == nil {
			err = resetBelow(ctx, tx, resource)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			// At or below `to` already (or no fence): nothing to lower.
			st, err = scanFence(tx.QueryRow(ctx, loadFenceSQL, resource))
			if errors.Is(err, pgx.ErrNoRows) {
				st, err = fencegate.FenceState{Ready: true}, nil
			}
		}
		return err
	})
	var rb *fencegate.ResetBelowIssuedError
	if errors.As(err, &rb) {
		return fencegate.FenceState{}, rb
	}
	if err != nil {
		return fencegate.FenceState{}, fmt.Errorf("reset fence %s to %d: %w", resource, to, err)
	}
	st.Resource = resource
	return st, nil
}
