package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/gateway"
	bbolt "go.etcd.io/bbolt"
)

var _ gateway.MemberStore = (*Store)(nil)

// HighestBelow implements gateway.MemberStore: the highest token of the
// records whose resource starts with prefix, logged (wal.go) or in bbolt.
// The log's pending advances are read first, then bbolt: a checkpoint
// forgets an entry only after bbolt has it, so none is missed in between.
func (s *Store) HighestBelow(ctx context.Context, prefix string) (int64, error) {
	var highest int64
	s.pending.mu.RLock()
	for res, e := range s.pending.m {
		if e.highest > highest && strings.HasPrefix(res, prefix) {
			highest = e.highest
		}
	}
	s.pending.mu.RUnlock()
	p := []byte(prefix)
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketFences).Cursor()
		n := 0
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			if n++; n%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var r fenceRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt fence record for %q: %w", k, err)
			}
			highest = max(highest, r.Highest)
		}
		return nil
	})
	return highest, err
}
