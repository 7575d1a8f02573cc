package bolt

import (
	"context"

	bbolt "go.etcd.io/bbolt"
)

// metaServing is set while a gateway serves from the store and cleared
// once it has stopped with no write left in flight. Found set at the next
// start, it says the previous process ended without draining (a crash):
// writes it forwarded may still be applied upstream until their route's
// timeout passes, and the new process has no record of them.
var metaServing = []byte("serving")

// BeginServing records that a gateway serves from the store and reports
// whether the previous one stopped without draining its writes.
func (s *Store) BeginServing(ctx context.Context) (unclean bool, err error) {
	err = s.db.Update(func(tx *bbolt.Tx) error {
		unclean = readMeta(tx, metaServing) != 0
		return putMeta(tx, metaServing, 1)
	})
	return unclean, err
}

// EndServing records that the gateway stopped with every write it
// admitted ended.
func (s *Store) EndServing(ctx context.Context) error {
	return s.db.Update(func(tx *bbolt.Tx) error { return putMeta(tx, metaServing, 0) })
}
