package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The S3 adapter's ETag bookkeeping (precondition.Store, used by the S3 adapter and HTTP routes) lives in the
// fence table's etag and etag_token columns: the row exists once a write
// was admitted, and the ETag is written after that write's answer. The
// etag path never touches highest, ready or owner.

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

// recordETagSQL sets the ETag unless a newer token's is recorded; it
// returns the row's etag_token either way, and no row if there is no fence.
const recordETagSQL = `WITH upd AS (
    UPDATE fence SET etag = $2, etag_token = $3 WHERE resource = $1 AND etag_token <= $3
    RETURNING etag_token)
SELECT etag_token FROM upd
UNION ALL
SELECT etag_token FROM fence WHERE resource = $1 AND NOT EXISTS (SELECT 1 FROM upd)`

// RecordETag stores etag for resource unless a write with a newer token has
// recorded one already. It is one round trip, committed with a WAL flush
// (durableSQL) even where synchronous_commit is off: a lost record would
// make the next write fail its precondition.
func (s *Store) RecordETag(ctx context.Context, resource string, token int64, etag string) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(durableSQL)
	b.Queue(recordETagSQL, resource, etag, token)
	b.Queue("COMMIT")
	br := s.Pool.SendBatch(ctx, b)
	err := func() error {
		for range 2 { // BEGIN, durableSQL
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var stored int64
		if err := br.QueryRow().Scan(&stored); errors.Is(err, pgx.ErrNoRows) {
			return errors.New("no fence record")
		} else if err != nil {
			return err
		}
		_, err := br.Exec() // COMMIT
		return err
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record etag of %s: %w", resource, err)
	}
	return nil
}
