package bolt

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	bbolt "go.etcd.io/bbolt"
)

// maxChanges bounds one commit, so that one transaction's memory and the
// latency of its first change stay bounded under any load.
const maxChanges = 4096

// ErrClosed reports a change submitted after Close.
var ErrClosed = errors.New("store is closed")

// committer is the store's group commit. One goroutine commits in a loop:
// each bbolt transaction carries every change queued while the previous
// one was being written and fsynced, and starts as soon as that one
// returns. An idle store commits a lone change at once (no batching delay);
// under load the queue that builds up during one fsync is the next batch.
// A change is acknowledged only after the commit that carried it returned,
// so it is on disk (bbolt fdatasyncs the pages, then the meta page).
type committer struct {
	db *bbolt.DB

	mu     sync.Mutex
	cond   sync.Cond // signalled when queue grows or closed is set
	queue  []*change
	closed bool
	done   chan struct{} // closed when the loop has returned

	commits atomic.Uint64
	changes atomic.Uint64
}

// change is one caller's part of a transaction. apply may run more than
// once (the transaction is retried without a change that failed), so it
// must set its results afresh on every run.
type change struct {
	apply func(tx *bbolt.Tx) error
	done  chan error // buffered: the committer never waits for the caller
}

func newCommitter(db *bbolt.DB) *committer {
	c := &committer{db: db, done: make(chan struct{})}
	c.cond.L = &c.mu
	go c.run()
	return c
}

// do queues apply and waits until the transaction carrying it committed.
// A ctx that ends first returns ctx.Err(); the change may still commit
// later, so it must be harmless whether or not it happens (every change of
// this store is raise-only or idempotent).
func (c *committer) do(ctx context.Context, apply func(tx *bbolt.Tx) error) error {
	return c.submit(apply).wait(ctx)
}

// submit queues apply; changes commit in the order they were submitted.
func (c *committer) submit(apply func(tx *bbolt.Tx) error) *change {
	ch := &change{apply: apply, done: make(chan error, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		ch.done <- ErrClosed
		return ch
	}
	c.queue = append(c.queue, ch)
	c.cond.Signal()
	return ch
}

// wait waits until the transaction carrying ch committed.
func (ch *change) wait(ctx context.Context) error {
	select {
	case err := <-ch.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *committer) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		n := min(len(c.queue), maxChanges)
		batch := make([]*change, n)
		copy(batch, c.queue)
		c.queue = append(c.queue[:0], c.queue[n:]...)
		c.mu.Unlock()
		if n == 0 {
			return // closed and drained
		}
		c.commit(batch)
	}
}

// commit applies batch in one transaction. A change whose apply fails gets
// its error and the others are committed without it (bbolt cannot roll back
// one change alone, so the transaction is run again).
func (c *committer) commit(batch []*change) {
	for len(batch) > 0 {
		failed, failure := -1, error(nil)
		err := c.db.Update(func(tx *bbolt.Tx) error {
			for i, ch := range batch {
				if err := ch.apply(tx); err != nil {
					failed, failure = i, err
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			batch[failed].done <- failure
			batch = append(batch[:failed], batch[failed+1:]...)
			continue
		}
		if err == nil {
			c.commits.Add(1)
			c.changes.Add(uint64(len(batch)))
		}
		for _, ch := range batch {
			ch.done <- err
		}
		return
	}
}

// close commits what is queued, refuses new changes and waits for the loop
// to end.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Signal()
	c.mu.Unlock()
	<-c.done
}

// Stats are the store's commit counters since Open.
type Stats struct {
	// Commits is the number of group commits that made changes durable:
	// batches of fence advances appended to the log (one fdatasync each,
	// wal.go) and bbolt transactions of the committer (two fdatasyncs
	// each: bbolt writes and syncs the pages, then the meta page).
	Commits uint64
	// Changes is the number of changes they carried (fence advances, ETag
	// marks, lease changes): Changes/Commits is the changes per commit.
	Changes uint64
	// Syncs is the number of fdatasyncs and fsyncs the store made: the
	// commits', the checkpoints' (two each) and the new log segments'.
	Syncs uint64
	// Checkpoints is the number of bbolt transactions that moved logged
	// advances into bbolt.
	Checkpoints uint64
	// LogErrors counts the advance log's failed appends (segment creation,
	// write, fdatasync); CheckpointErrors its failed checkpoints.
	LogErrors, CheckpointErrors uint64
	// LogState is 0 while the advance log appends, 1 while it fails for a
	// cause that heals (no space to create a segment), 2 once it failed
	// for good (a failed fdatasync: restart the process).
	LogState int
}

// Stats returns the store's commit counters.
func (s *Store) Stats() Stats {
	c, l := s.commit, s.log
	return Stats{
		Commits:          c.commits.Load() + l.batches.Load(),
		Changes:          c.changes.Load() + l.changes.Load(),
		Syncs:            2*c.commits.Load() + l.syncs.Load(),
		Checkpoints:      l.checkpoints.Load(),
		LogErrors:        l.writeErrors.Load(),
		CheckpointErrors: l.checkpointErrors.Load(),
		LogState:         l.logState(),
	}
}
