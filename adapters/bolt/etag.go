package bolt

import (
	"context"
	"fmt"

	bbolt "go.etcd.io/bbolt"
)

// The S3 adapter's ETag bookkeeping (precondition.Store, used by the S3 adapter and HTTP routes) lives on the
// object's fence record: the record exists once a write was admitted, and
// the ETag is written after that write's answer.

// LastETag returns the ETag the gateway last recorded for resource.
func (s *Store) LastETag(ctx context.Context, resource string) (string, error) {
	var r fenceRecord
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		r, err = getFence(tx, resource)
		return err
	})
	return r.ETag, err
}

// RecordETag stores etag for resource unless a write with a newer token has
// recorded one already; fsynced before it returns.
func (s *Store) RecordETag(ctx context.Context, resource string, token int64, etag string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Batch(func(tx *bbolt.Tx) error {
		r, err := getFence(tx, resource)
		if err != nil {
			return err
		}
		if r.Highest == 0 {
			return fmt.Errorf("no fence record")
		}
		if token < r.ETagToken {
			return nil
		}
		r.ETag, r.ETagToken = etag, token
		return putFence(tx, resource, r)
	})
	if err != nil {
		return fmt.Errorf("record etag of %q: %w", resource, err)
	}
	return nil
}
