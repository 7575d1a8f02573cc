package bolt

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	bbolt "go.etcd.io/bbolt"
)

// ResetFence lowers the fence of resource to `to`, the only path that
// lowers a fence (docs/design.md I7), and only when the coordinator's
// records agree: `to` must be at least the highest token ever issued for
// resource, so every issued token is <= to and none that is older than the
// current lease can pass; and the token counter is raised to `to` in the
// same transaction, so every later lease is above it. One bbolt transaction
// reads the lease record, raises the counter and writes the fence: no lease
// can be issued in between. A fence already at or below `to` is left as it
// is. Refusals are fencegate.ErrResetNotPositive and
// *fencegate.ResetBelowIssuedError.
func (s *Store) ResetFence(ctx context.Context, resource string, to int64, owner string) (fencegate.FenceState, error) {
	if err := ctx.Err(); err != nil {
		return fencegate.FenceState{}, err
	}
	if to <= 0 {
		return fencegate.FenceState{}, fencegate.ErrResetNotPositive
	}
	var (
		r       fenceRecord
		refused error
	)
	// In the checkpoint's transaction: every logged advance is in bbolt
	// and covered before the fence is lowered (wal.go).
	err := s.log.checkpoint(func(tx *bbolt.Tx) error {
		var err error
		refused = nil
		if r, err = getFence(tx, resource); err != nil {
			return err
		}
		lr, _, err := getLease(tx, resource)
		if err != nil {
			return err
		}
		if to < lr.Token {
			refused = &fencegate.ResetBelowIssuedError{Resource: resource, To: to, Issued: lr.Token}
			return nil
		}
		if err := raiseCounter(tx, to); err != nil {
			return err
		}
		if r.Highest <= to {
			return nil
		}
		// The ETag's token is lowered with the fence (the version it
		// names kept): an ETag is never recorded over a newer token's, so
		// one left at the mistaken token would refuse every record of the
		// new value's writes. The cache's entry (which a write-back puts
		// in the file later) is lowered in the same transaction.
		r = fenceRecord{Highest: to, Owner: owner, ETag: r.ETag, ETagToken: min(r.ETagToken, to), UpdatedAt: time.Now().UTC()}
		s.etags.mu.Lock()
		if e, ok := s.etags.m[resource]; ok {
			e.token = min(e.token, to)
		}
		s.etags.mu.Unlock()
		return putFence(tx, s.known, resource, r)
	})
	if err != nil {
		return fencegate.FenceState{}, fmt.Errorf("reset fence %q: %w", resource, err)
	}
	if refused != nil {
		return fencegate.FenceState{}, refused
	}
	return r.state(resource), nil
}
