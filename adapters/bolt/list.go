package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator"
	bbolt "go.etcd.io/bbolt"
)

// MaxListLimit caps one page of a listing, so that a single call holds at
// most this many records in memory whatever the caller asks for.
const MaxListLimit = 1000

// ListFences returns up to limit fence records whose resource starts with
// prefix and sorts after after (byte order), in byte order. Pass the last
// resource of a page as after to get the next one; a page shorter than
// limit is the last. Each page is one read transaction walking a bbolt
// cursor from the seek position, so a listing of any size holds one page in
// memory, and since records are never removed or renamed (I7) a resource
// that exists throughout a paginated listing is returned exactly once even
// while fences advance.
func (s *Store) ListFences(ctx context.Context, prefix, after string, limit int) ([]fencegate.FenceState, error) {
	var out []fencegate.FenceState
	// Logged advances into bbolt first (wal.go): a listing walks bbolt.
	if err := s.log.checkpoint(nil); err != nil {
		return nil, err
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		return scan(ctx, tx.Bucket(bucketFences), prefix, after, limit, func(k, v []byte) error {
			var r fenceRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt fence record for %q: %w", k, err)
			}
			out = append(out, s.overlay(r.state(string(k))))
			return nil
		})
	})
	return out, err
}

// ListLeases is ListFences for lease records: every resource ever leased
// (a released or expired lease keeps its record, with Remaining <= 0).
func (ls *Leases) ListLeases(ctx context.Context, prefix, after string, limit int) ([]coordinator.Lease, error) {
	var out []coordinator.Lease
	t := now()
	err := ls.st.db.View(func(tx *bbolt.Tx) error {
		return scan(ctx, tx.Bucket(bucketLeases), prefix, after, limit, func(k, v []byte) error {
			var r leaseRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt lease record for %q: %w", k, err)
			}
			out = append(out, r.lease(string(k), t))
			return nil
		})
	})
	return out, err
}

// scan calls f for up to limit keys of b that start with prefix and sort
// after after.
func scan(ctx context.Context, b *bbolt.Bucket, prefix, after string, limit int, f func(k, v []byte) error) error {
	if limit <= 0 || limit > MaxListLimit {
		limit = MaxListLimit
	}
	p := []byte(prefix)
	c := b.Cursor()
	var k, v []byte
	if after != "" && after >= prefix {
		k, v = c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, v = c.Next()
		}
	} else {
		k, v = c.Seek(p)
	}
	for n := 0; k != nil && n < limit && bytes.HasPrefix(k, p); k, v = c.Next() {
		if n%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := f(k, v); err != nil {
			return err
		}
		n++
	}
	return nil
}
