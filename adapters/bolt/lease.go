package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	bbolt "go.etcd.io/bbolt"
)

var (
	// bucketLeases maps a resource to its leaseRecord.
	bucketLeases = []byte("leases")
	// bucketLeaseCounter holds the highest token ever issued (key
	// counterKey, 8 bytes big-endian), so tokens keep increasing across
	// restarts (I5) even for a resource whose record is new.
	bucketLeaseCounter = []byte("lease_counter")
	counterKey         = []byte("highest_token")
)

// Leases is the coordinator's backend on the embedded store: the same
// contract as the PostgreSQL one for a single process. Every change is
// fsynced before it is answered, concurrent changes sharing one commit
// (the store's group commit, commit.go). Times come from this process's clock, the only one.
type Leases struct {
	st *Store
	// drawn is the highest token drawn by this process, including drawings
	// whose transaction then failed. Like a PostgreSQL sequence it is not
	// rolled back, so an aborted acquisition leaves a gap (I5: the gap
	// grants nothing) rather than a number handed out twice to this
	// process's callers.
	drawn atomic.Int64
	// failAfterDraw, set by tests, runs inside the acquire transaction
	// after the token was drawn and the record written; an error aborts it.
	failAfterDraw func(token int64) error
}

var _ coordinator.Backend = (*Leases)(nil)

// NewLeases returns the lease backend on st.
func NewLeases(st *Store) *Leases { return &Leases{st: st} }

// leaseRecord is the stored form of a lease. The record stays after release
// or expiry: its token is the highest issued for the resource.
type leaseRecord struct {
	Token     int64     `json:"token"`
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expires_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func getLease(tx *bbolt.Tx, resource string) (leaseRecord, bool, error) {
	var r leaseRecord
	v := tx.Bucket(bucketLeases).Get([]byte(resource))
	if v == nil {
		return r, false, nil
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("corrupt lease record for %q: %w", resource, err)
	}
	return r, true, nil
}

func putLease(tx *bbolt.Tx, resource string, r leaseRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketLeases).Put([]byte(resource), v)
}

func (r leaseRecord) lease(resource string, now time.Time) coordinator.Lease {
	return coordinator.Lease{
		Resource: resource, Owner: r.Owner, Token: r.Token,
		ExpiresAt: r.ExpiresAt, Remaining: r.ExpiresAt.Sub(now),
	}
}

// draw takes the next token inside tx: above both the persisted counter and
// every token this process drew before.
func (ls *Leases) draw(tx *bbolt.Tx) (int64, error) {
	b := tx.Bucket(bucketLeaseCounter)
	var stored int64
	if v := b.Get(counterKey); len(v) == 8 {
		stored = int64(binary.BigEndian.Uint64(v))
	}
	for {
		prev := ls.drawn.Load()
		next := max(prev, stored) + 1
		if next <= 0 {
			return 0, fmt.Errorf("token counter exhausted")
		}
		if ls.drawn.CompareAndSwap(prev, next) {
			return next, b.Put(counterKey, binary.BigEndian.AppendUint64(nil, uint64(next)))
		}
	}
}

// now is the store's clock: wall time without the monotonic reading, so
// that what is compared is what is stored.
func now() time.Time { return time.Now().Round(0).UTC() }

// Acquire implements coordinator.Backend.
func (ls *Leases) Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (coordinator.Lease, bool, error) {
	if err := ctx.Err(); err != nil {
		return coordinator.Lease{}, false, err
	}
	var (
		out   coordinator.Lease
		fresh bool
		held  bool
	)
	// The change may run more than once; every result is set on each run.
	err := ls.st.commit.do(ctx, func(tx *bbolt.Tx) error {
		t := now()
		cur, ok, err := getLease(tx, resource)
		if err != nil {
			return err
		}
		live := ok && cur.ExpiresAt.After(t)
		held, fresh = false, false
		switch {
		case live && cur.Owner != owner:
			held, out = true, cur.lease(resource, t)
			return nil
		case live: // the holder retrying its acquire: same token, extended
			cur.ExpiresAt, cur.UpdatedAt = t.Add(ttl), t
		default:
			tok, err := ls.draw(tx)
			if err != nil {
				return err
			}
			cur = leaseRecord{Token: tok, Owner: owner, ExpiresAt: t.Add(ttl), UpdatedAt: t}
			fresh = true
		}
		if err := putLease(tx, resource, cur); err != nil {
			return err
		}
		if fresh && ls.failAfterDraw != nil {
			if err := ls.failAfterDraw(cur.Token); err != nil {
				return err
			}
		}
		out = cur.lease(resource, t)
		return nil
	})
	if err != nil {
		return coordinator.Lease{}, false, fmt.Errorf("acquire lease %q: %w", resource, err)
	}
	if held {
		return out, false, coordinator.ErrHeld
	}
	return out, fresh, nil
}

// Renew implements coordinator.Backend.
func (ls *Leases) Renew(ctx context.Context, resource, owner string, token int64, ttl time.Duration) (coordinator.Lease, error) {
	if err := ctx.Err(); err != nil {
		return coordinator.Lease{}, err
	}
	var out coordinator.Lease
	var lost bool
	err := ls.st.commit.do(ctx, func(tx *bbolt.Tx) error {
		t := now()
		cur, ok, err := getLease(tx, resource)
		if err != nil {
			return err
		}
		lost = !ok || cur.Owner != owner || cur.Token != token || !cur.ExpiresAt.After(t)
		if lost {
			return nil
		}
		cur.ExpiresAt, cur.UpdatedAt = t.Add(ttl), t
		out = cur.lease(resource, t)
		return putLease(tx, resource, cur)
	})
	if err != nil {
		return coordinator.Lease{}, fmt.Errorf("renew lease %q: %w", resource, err)
	}
	if lost {
		return coordinator.Lease{}, coordinator.ErrLost
	}
	return out, nil
}

// Release implements coordinator.Backend.
func (ls *Leases) Release(ctx context.Context, resource, owner string, token int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var released bool
	err := ls.st.commit.do(ctx, func(tx *bbolt.Tx) error {
		t := now()
		cur, ok, err := getLease(tx, resource)
		if err != nil {
			return err
		}
		released = ok && cur.Owner == owner && cur.Token == token && cur.ExpiresAt.After(t)
		if !released {
			return nil
		}
		cur.ExpiresAt, cur.UpdatedAt = t, t
		return putLease(tx, resource, cur)
	})
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", resource, err)
	}
	return released, nil
}

// Lease implements coordinator.Backend.
func (ls *Leases) Lease(ctx context.Context, resource string) (coordinator.Lease, error) {
	var out coordinator.Lease
	err := ls.st.db.View(func(tx *bbolt.Tx) error {
		cur, ok, err := getLease(tx, resource)
		if ok {
			out = cur.lease(resource, now())
		}
		return err
	})
	out.Resource = resource
	return out, err
}

// Issued returns the highest token issued for resource (0 if none): the
// token of its record, which only ever grows.
func (ls *Leases) Issued(ctx context.Context, resource string) (int64, error) {
	l, err := ls.Lease(ctx, resource)
	return l.Token, err
}

// Active counts the leases live now (a released lease has expired). It
// reads every lease record: it is meant for a metrics scrape, not for the
// request path.
func (ls *Leases) Active(ctx context.Context) (int, error) {
	n, t := 0, now()
	err := ls.st.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketLeases).ForEach(func(k, v []byte) error {
			var r leaseRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt lease record for %q: %w", k, err)
			}
			if r.ExpiresAt.After(t) {
				n++
			}
			return nil
		})
	})
	return n, err
}

// raiseCounter raises the persisted counter to above inside tx (fence
// reset; RaiseSequence in its own transaction). draw takes the maximum of it
// and the process's own drawings, so raising only the persisted value is
// enough.
func raiseCounter(tx *bbolt.Tx, above int64) error {
	b := tx.Bucket(bucketLeaseCounter)
	if v := b.Get(counterKey); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= above {
		return nil
	}
	return b.Put(counterKey, binary.BigEndian.AppendUint64(nil, uint64(above)))
}
