package bolt

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	bbolt "go.etcd.io/bbolt"
)

// bucketMeta holds the store's identity (key metaID): a random value
// drawn when the file is created, so that a gateway can tell its store from
// a new, empty one put in its place (server's store identity file).
var (
	bucketMeta = []byte("meta")
	metaID     = []byte("id")
)

// ensureID gives a store without an identity one; it runs in Open's
// transaction.
func ensureID(tx *bbolt.Tx) error {
	b := tx.Bucket(bucketMeta)
	if b.Get(metaID) != nil {
		return nil
	}
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	return b.Put(metaID, []byte(hex.EncodeToString(rnd[:])))
}

// StoreID returns the store's identity, drawn when the file was created.
func (s *Store) StoreID(ctx context.Context) (string, error) {
	var id string
	err := s.db.View(func(tx *bbolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(metaID))
		return nil
	})
	return id, err
}

// ExportFences calls fn with every fence record, in resource order, from
// one consistent snapshot. It walks a cursor: memory stays bounded however
// many records there are.
func (s *Store) ExportFences(ctx context.Context, fn func(fencegate.FenceRecord) error) error {
	// Logged advances into bbolt first (wal.go).
	if err := s.log.checkpoint(nil); err != nil {
		return err
	}
	return s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketFences).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := getFence(tx, string(k))
			if err != nil {
				return err
			}
			if err := fn(fencegate.FenceRecord{Resource: string(k), Highest: r.Highest, Owner: r.Owner, ETag: r.ETag}); err != nil {
				return err
			}
		}
		return nil
	})
}

// ImportFences max-merges recs into the store in one fsynced transaction:
// a record raises its resource's fence if it is higher than the stored one
// and is ignored otherwise (I7: an import never lowers a fence). A raised or
// new record takes the imported owner and ETag. It returns how many fences
// were raised or created.
func (s *Store) ImportFences(ctx context.Context, recs []fencegate.FenceRecord) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for _, r := range recs {
		if r.Resource == "" || r.Highest <= 0 {
			return 0, fmt.Errorf("import fence %q: resource and a positive highest are required", r.Resource)
		}
	}
	var (
		raised   int
		replaced []string
	)
	err := s.log.checkpoint(func(tx *bbolt.Tx) error {
		raised, replaced = 0, replaced[:0]
		now := time.Now().UTC()
		for _, in := range recs {
			cur, err := getFence(tx, in.Resource)
			if err != nil {
				return err
			}
			if in.Highest <= cur.Highest {
				continue
			}
			r := fenceRecord{Highest: in.Highest, Owner: in.Owner, ETag: in.ETag,
				ETagToken: max(cur.ETagToken, in.Highest), UpdatedAt: now}
			if err := putFence(tx, s.known, in.Resource, r); err != nil {
				return err
			}
			raised++
			replaced = append(replaced, in.Resource)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("import fences: %w", err)
	}
	s.forgetETags(replaced)
	return raised, nil
}

// RaiseSequence makes every token the coordinator issues from now on
// greater than token (after an import, above every imported fence: a new
// lease must never get a token a fence already refuses or equals). It
// never lowers the counter.
func (ls *Leases) RaiseSequence(ctx context.Context, token int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if token <= 0 {
		return errors.New("raise sequence: token must be positive")
	}
	err := ls.st.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketLeaseCounter)
		if v := b.Get(counterKey); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= token {
			return nil
		}
		return b.Put(counterKey, binary.BigEndian.AppendUint64(nil, uint64(token)))
	})
	if err != nil {
		return fmt.Errorf("raise sequence to %d: %w", token, err)
	}
	return nil
}
