package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
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

var _ precondition.Forgetter = (*Store)(nil)

// ForgetETagsBelow implements precondition.Forgetter: every ETag record
// whose resource starts with prefix becomes unknown, in memory and, where
// the file may hold a known one, durably before it returns. The change to
// the file is submitted under the cache's lock like every ownership change
// (etag.go), so it lands after any write-back submitted before it.
func (s *Store) ForgetETagsBelow(ctx context.Context, prefix string, token int64) error {
	c := &s.etags
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("forget etags below %q: %w", prefix, ErrClosed)
	}
	need := false
	for r, e := range c.m {
		if !strings.HasPrefix(r, prefix) {
			continue
		}
		e.etag, e.token = fencegate.ETagUnknown, max(e.token, token)
		// A write-back of this entry may still be on its way to the file.
		need = need || !e.owned
	}
	p := []byte(prefix)
	if !need {
		err := s.db.View(func(tx *bbolt.Tx) error {
			cur := tx.Bucket(bucketFences).Cursor()
			for k, v := cur.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = cur.Next() {
				var r fenceRecord
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("corrupt fence record for %q: %w", k, err)
				}
				if r.ETag != "" && r.ETag != fencegate.ETagUnknown {
					need = true
					return nil
				}
			}
			return nil
		})
		if err != nil {
			c.mu.Unlock()
			return err
		}
	}
	if !need {
		c.mu.Unlock()
		return nil
	}
	ch := s.commit.submit(func(tx *bbolt.Tx) error {
		cur := tx.Bucket(bucketFences).Cursor()
		var keys []string
		for k, v := cur.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = cur.Next() {
			var r fenceRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt fence record for %q: %w", k, err)
			}
			if r.ETag != fencegate.ETagUnknown {
				keys = append(keys, string(k))
			}
		}
		for _, k := range keys {
			r, err := s.getFenceTx(tx, k)
			if err != nil {
				return err
			}
			r.ETag, r.ETagToken = fencegate.ETagUnknown, max(r.ETagToken, token)
			if err := putFence(tx, s.known, k, r); err != nil {
				return err
			}
		}
		return nil
	})
	c.mu.Unlock()
	if err := ch.wait(ctx); err != nil {
		return fmt.Errorf("forget etags below %q: %w", prefix, err)
	}
	return nil
}
