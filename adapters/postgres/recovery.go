package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

// StoreID returns the database's identity (migration 045), drawn when the
// schema was created.
func (s *Store) StoreID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var id string
	if err := s.Pool.QueryRow(ctx, `SELECT value FROM fencegate_meta WHERE key = 'id'`).Scan(&id); err != nil {
		return "", fmt.Errorf("load store id: %w", err)
	}
	return id, nil
}

// ExportFences calls fn with every fence record in resource order, from
// one snapshot. Rows are streamed from the server as fn consumes them, so
// memory stays bounded. The statement has no timeout (the export may take
// longer than one request's).
func (s *Store) ExportFences(ctx context.Context, fn func(fencegate.FenceRecord) error) error {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("export fences: %w", err)
	}
	defer conn.Release()
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT resource, highest, owner, etag FROM fence ORDER BY resource`)
		if err != nil {
			return fmt.Errorf("export fences: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r fencegate.FenceRecord
			if err := rows.Scan(&r.Resource, &r.Highest, &r.Owner, &r.ETag); err != nil {
				return fmt.Errorf("export fences: %w", err)
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// importSQL max-merges one record: a new row, or a raise of a lower one
// (which, as any raise, is not ready until a writer of the new token has
// drained older in-flight writes in shared mode). A row at or above the
// imported token is left as it is; the table's trigger refuses a decrease
// in any case.
const importSQL = `INSERT INTO fence AS f (resource, highest, ready, owner, etag, etag_token) VALUES ($1, $2, true, $3, $4, $2)
ON CONFLICT (resource) DO UPDATE
   SET highest = EXCLUDED.highest, ready = false, owner = EXCLUDED.owner,
       etag = EXCLUDED.etag, etag_token = GREATEST(f.etag_token, EXCLUDED.etag_token), updated_at = clock_timestamp()
 WHERE f.highest < EXCLUDED.highest`

// ImportFences max-merges recs into the fence table in one synchronously
// committed transaction and returns how many fences were raised or created.
func (s *Store) ImportFences(ctx context.Context, recs []fencegate.FenceRecord) (int, error) {
	for _, r := range recs {
		if r.Resource == "" || r.Highest <= 0 {
			return 0, fmt.Errorf("import fence %q: resource and a positive highest are required", r.Resource)
		}
	}
	var raised int
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		raised = 0
		if _, err := tx.Exec(ctx, durableSQL); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, r := range recs {
			b.Queue(importSQL, r.Resource, r.Highest, r.Owner, r.ETag)
		}
		br := tx.SendBatch(ctx, b)
		for range recs {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			raised += int(tag.RowsAffected())
		}
		return br.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("import fences: %w", err)
	}
	return raised, nil
}

// raiseSequenceSQL raises resource_fence_token_seq so that its next value
// exceeds $1, never lowering it. The SHARE ROW EXCLUSIVE lock on
// resource_fence waits for, and holds off, every acquire (each draws its
// token inside an INSERT on that table, under ROW EXCLUSIVE): without it a
// token drawn between reading the sequence and setval could be drawn again.
const raiseSequenceSQL = `SELECT setval('resource_fence_token_seq', $1::bigint, true)
  FROM resource_fence_token_seq
 WHERE (is_called AND last_value < $1::bigint) OR (NOT is_called AND last_value <= $1::bigint)`

// RaiseSequence makes every token the coordinator issues from now on
// greater than token (after an import, above every imported fence: a new
// lease must never get a token a fence refuses or equals). It never lowers
// the sequence.
func (ls *Leases) RaiseSequence(ctx context.Context, token int64) error {
	if token <= 0 {
		return errors.New("raise sequence: token must be positive")
	}
	ctx, cancel := ls.timeout(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, ls.st.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE resource_fence IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, raiseSequenceSQL, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("raise sequence to %d: %w", token, err)
	}
	return nil
}
