package bolt

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/gateway"
	bbolt "go.etcd.io/bbolt"
)

// The serving record (gateway.ServingStore; docs/design.md, "After a crash
// (local fence)"). metaServing says whether the gateway serving from the
// store may have writes in flight: servingStopped (it stopped with none),
// servingBusy (found at the next start: it crashed while they may have
// been), servingQuiet (it serves with none in flight). Earlier versions
// wrote 1 while serving and 0 at a clean stop, and read anything but 0 as a
// crash, so both directions of an upgrade are safe.
//
// The busy and quiet records are marks of the advance log (wal.go): a
// mark's token, 0 in a plain mark, carries the state and the bound
// (servingMark), so a busy record costs one append and one fdatasync,
// shared with the advances of the same batch. A checkpoint copies the
// last one into metaServing before its segment goes; the replay at Open
// applies the last one logged. Earlier versions ignore a mark's token.
var (
	metaServing      = []byte("serving")
	metaServingBound = []byte("serving_bound") // milliseconds, with servingBusy
	// bucketDraining holds, per resource advanced over older writes in
	// flight since the last quiet record, the token and when (16 bytes).
	bucketDraining = []byte("draining")
)

const (
	servingStopped uint64 = 0
	servingBusy    uint64 = 1
	servingQuiet   uint64 = 2
	// markStopped is the mark's code for servingStopped (0 is a plain mark).
	markStopped uint64 = 3
)

var _ gateway.ServingStore = (*Store)(nil)

// servingMark encodes a state (and the bound, with busy) as a mark's token.
func servingMark(state uint64, bound time.Duration) uint64 {
	if state == servingStopped {
		state = markStopped
	}
	return uint64(bound.Milliseconds())<<2 | state
}

// putServing writes the state a mark's token carries into metaServing.
func putServing(tx *bbolt.Tx, mark uint64) error {
	state := mark & 3
	if state == markStopped {
		state = servingStopped
	}
	if err := putMeta(tx, metaServing, state); err != nil {
		return err
	}
	return putMeta(tx, metaServingBound, mark>>2)
}

// LastRun implements gateway.ServingStore.
func (s *Store) LastRun(ctx context.Context) (gateway.PreviousRun, error) {
	var prev gateway.PreviousRun
	// The log's last serving mark into bbolt first.
	if err := s.log.checkpoint(nil); err != nil {
		return prev, err
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		prev.Unclean = readMeta(tx, metaServing) == servingBusy
		prev.Bound = time.Duration(readMeta(tx, metaServingBound)) * time.Millisecond
		b := tx.Bucket(bucketDraining)
		if b == nil || !prev.Unclean {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(v) != 16 {
				return fmt.Errorf("corrupt draining record for %q", k)
			}
			if prev.Draining == nil {
				prev.Draining = map[string]gateway.Draining{}
			}
			prev.Draining[string(k)] = gateway.Draining{
				Token: int64(binary.BigEndian.Uint64(v)),
				At:    time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))),
			}
			return nil
		})
	})
	return prev, err
}

// MarkServing implements gateway.ServingStore: a mark of the advance log,
// durable when it returns. A quiet record also forgets the draining
// records (none of their writes is in flight any more).
func (s *Store) MarkServing(ctx context.Context, busy bool, bound time.Duration) error {
	state := servingQuiet
	if !busy {
		if err := s.clearDraining(ctx); err != nil {
			return err
		}
	} else {
		state = servingBusy
	}
	return s.log.mark(ctx, servingMark(state, bound))
}

// clearDraining empties bucketDraining if it has anything.
func (s *Store) clearDraining(ctx context.Context) error {
	empty := true
	s.db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(bucketDraining); b != nil {
			k, _ := b.Cursor().First()
			empty = k == nil
		}
		return nil
	})
	if empty {
		return nil
	}
	return s.commit.do(ctx, func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketDraining) == nil {
			return nil
		}
		if err := tx.DeleteBucket(bucketDraining); err != nil {
			return err
		}
		_, err := tx.CreateBucket(bucketDraining)
		return err
	})
}

// MarkDraining implements gateway.ServingStore (a group commit of bbolt:
// it is written only when an advance supersedes writes in flight).
func (s *Store) MarkDraining(ctx context.Context, resource string, token int64, at time.Time) error {
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(token)), uint64(at.UnixNano()))
	return s.commit.do(ctx, func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketDraining)
		if err != nil {
			return err
		}
		return b.Put([]byte(resource), v)
	})
}

// EndServing implements gateway.ServingStore.
func (s *Store) EndServing(ctx context.Context) error {
	return s.log.mark(ctx, servingMark(servingStopped, 0))
}
