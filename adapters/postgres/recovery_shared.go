package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/sharedfence"
)

// Recovery of a shared replica after a lost marker session (docs/design.md
// §4, "A replica that comes back"). A session lost with the database
// (restart, failover) or its link leaves its row in fence_session, and
// every drain waits the session's forward timeout from when it was found
// gone: its markers vanished while writes they protected might still be on
// their way. The replica knows those writes: it aborted them when it lost
// the session. One whose request had not gone out whole is cut short and
// never applied: it has ended when its forward returns. One whose request
// went out whole may still be applied by the upstream, whatever becomes of
// its connection, until its forward bound (the forward timeout from its
// marker read) has passed. Once every write of the session has ended and
// that bound has passed, nothing of it can land any more, and the replica
// deletes the row, so drains stop waiting for it: a replica that comes
// back with nothing in flight costs the others only the time to reconnect.
// A replica that does not come back is waited out by its own rows' forward
// timeouts, as before.

// sessionForgetSQL deletes the rows of this replica's lost sessions whose
// writes have all ended.
const sessionForgetSQL = `DELETE FROM fence_session WHERE id = ANY($1::int[])`

// recoveryGrace is how long a write keeps polling a dead session's bound
// that does not fit in its drain timeout before it is refused: a replica
// that comes back (after a database restart or a failover, every one
// does) deletes its lost sessions' rows within about this long.
const recoveryGrace = 3 * time.Second

// forgetter deletes the rows of lost sessions whose writes have ended.
type forgetter struct {
	mu   sync.Mutex
	ids  []int32
	kick chan struct{}
}

// forget queues the row of session id for deletion once until has passed
// (its writes have all ended, and the forward bound of those whose
// request went out whole ends at until).
func (f *SharedFence) forget(id int32, until time.Time) {
	if d := time.Until(until); d > 0 {
		time.AfterFunc(d, func() { f.forget(id, time.Time{}) })
		return
	}
	f.forgets.mu.Lock()
	f.forgets.ids = append(f.forgets.ids, id)
	f.forgets.mu.Unlock()
	select {
	case f.forgets.kick <- struct{}{}:
	default:
	}
}

// runForget deletes queued rows until the fence is closed, retrying while
// the database is down.
func (f *SharedFence) runForget() {
	for {
		select {
		case <-f.forgets.kick:
		case <-f.closing:
			return
		}
		for {
			f.forgets.mu.Lock()
			ids := f.forgets.ids
			f.forgets.ids = nil
			f.forgets.mu.Unlock()
			if len(ids) == 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.storeTimeout)
			_, err := f.pool.Exec(ctx, sessionForgetSQL, ids)
			cancel()
			if err == nil {
				f.log.Info("lost marker sessions forgotten: their writes have all ended, drains no longer wait for them", "sessions", ids)
				continue
			}
			f.forgets.mu.Lock()
			f.forgets.ids = append(ids, f.forgets.ids...)
			f.forgets.mu.Unlock()
			select {
			case <-f.closing:
				return
			case <-time.After(sharedfence.RecoveryPoll):
			}
		}
	}
}

// holds tracks the writes waiting for a dead session's bound (the status).
type holds struct {
	mu    sync.Mutex
	held  map[string]int
	until time.Time
}

func (h *holds) add(resource string, until time.Time) {
	h.mu.Lock()
	if h.held == nil {
		h.held = map[string]int{}
	}
	h.held[resource]++
	if until.After(h.until) {
		h.until = until
	}
	h.mu.Unlock()
}

func (h *holds) done(resource string) {
	h.mu.Lock()
	if h.held[resource]--; h.held[resource] <= 0 {
		delete(h.held, resource)
	}
	h.mu.Unlock()
}

// Recovery reports the writes of this replica that wait for a marker
// session lost with writes possibly in flight (its own or another
// replica's) right now.
func (f *SharedFence) Recovery() gateway.RecoveryStatus {
	f.holds.mu.Lock()
	defer f.holds.mu.Unlock()
	if len(f.holds.held) == 0 {
		return gateway.RecoveryStatus{}
	}
	return gateway.RecoveryStatus{Recovering: true, Until: f.holds.until, Held: len(f.holds.held),
		Reason: "a marker session was lost (database restart, failover, a replica gone) while its writes may have been in flight; waiting for its replica to come back or its forward timeout"}
}
