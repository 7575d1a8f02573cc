package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The S3 adapter's ETag bookkeeping (adapters/s3.ETagStore) lives in the
// fence table's etag and etag_token columns: the row exists once a write
// was admitted, and the ETag is written after that write's answer.

// LastETag returns the ETag the gateway last recorded for resource.
func (s *Store) LastETag(ctx context.Context, resource string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var etag string
	err := s.Pool.QueryRow(ctx, `SELECT etag FROM fence WHERE resource = $1`, resource).Scan(&etag)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load etag of %s: %w", resource, err)
	}
	return etag, nil
}

// RecordETag stores etag for resource unless a write with a newer token has
// recorded one already. It is committed synchronously: a lost record would
// make the next write fail its precondition.
func (s *Store) RecordETag(ctx context.Context, resource string, token int64, etag string) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	tag, err := s.Pool.Exec(ctx, `UPDATE fence SET etag = $2, etag_token = $3
		WHERE resource = $1 AND etag_token <= $3`, resource, etag, token)
	if err != nil {
		return fmt.Errorf("record etag of %s: %w", resource, err)
	}
	if tag.RowsAffected() == 0 {
		var exists bool
		if err := s.Pool.QueryRow(ctx, `SELECT true FROM fence WHERE resource = $1`, resource).Scan(&exists); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("record etag of %s: no fence record", resource)
		}
	}
	return nil
}
