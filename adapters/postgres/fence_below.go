package postgres

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
	"github.com/jackc/pgx/v5"
)

var _ gateway.MemberStore = (*Store)(nil)

// highestBelowSQL reads the highest token of the fences whose resource
// starts with $1, as a range in byte order (index fence_resource_bytes):
// $2 is $1 with its last byte raised by one, the first string after every
// one that starts with $1. Prefixes end in '/', so the raise never
// overflows a byte.
const highestBelowSQL = `SELECT coalesce(max(highest), 0) FROM fence
 WHERE resource COLLATE "C" >= $1 AND resource COLLATE "C" < $2`

// HighestBelow implements gateway.MemberStore.
func (s *Store) HighestBelow(ctx context.Context, prefix string) (int64, error) {
	end, err := prefixEnd(prefix)
	if err != nil {
		return 0, fmt.Errorf("highest below: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var highest int64
	if err = s.Pool.QueryRow(ctx, highestBelowSQL, prefix, end).Scan(&highest); err != nil {
		return 0, fmt.Errorf("highest below %s: %w", prefix, err)
	}
	return highest, nil
}

var _ precondition.Forgetter = (*Store)(nil)

// forgetBelowSQL marks every ETag record below a prefix unknown ($1, $2 as
// in highestBelowSQL).
const forgetBelowSQL = `UPDATE fence SET etag = $3, etag_token = greatest(etag_token, $4)
 WHERE resource COLLATE "C" >= $1 AND resource COLLATE "C" < $2 AND etag <> $3`

// ForgetETagsBelow implements precondition.Forgetter, committed with a WAL
// flush like RecordETag.
func (s *Store) ForgetETagsBelow(ctx context.Context, prefix string, token int64) error {
	end, err := prefixEnd(prefix)
	if err != nil {
		return fmt.Errorf("forget etags below: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(durableSQL)
	b.Queue(forgetBelowSQL, prefix, end, fencegate.ETagUnknown, token)
	b.Queue("COMMIT")
	if err := s.Pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("forget etags below %s: %w", prefix, err)
	}
	return nil
}

// prefixEnd is the first string in byte order after every string that
// starts with prefix: prefix with its last byte raised by one (a key
// prefix ends in '/', so the raise never overflows).
func prefixEnd(prefix string) (string, error) {
	if prefix == "" || prefix[len(prefix)-1] == 0xff {
		return "", fmt.Errorf("%q is not a collection prefix", prefix)
	}
	return prefix[:len(prefix)-1] + string([]byte{prefix[len(prefix)-1] + 1}), nil
}
