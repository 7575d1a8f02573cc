package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/gateway"
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
	if prefix == "" || prefix[len(prefix)-1] == 0xff {
		return 0, fmt.Errorf("highest below %q: not a collection prefix", prefix)
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	end := prefix[:len(prefix)-1] + string([]byte{prefix[len(prefix)-1] + 1})
	var highest int64
	if err := s.Pool.QueryRow(ctx, highestBelowSQL, prefix, end).Scan(&highest); err != nil {
		return 0, fmt.Errorf("highest below %s: %w", prefix, err)
	}
	return highest, nil
}

// errNoScopes refuses a hierarchical write (gateway.Scope) in shared mode.
var errNoScopes = errors.New("hierarchical routes need fence mode local")
