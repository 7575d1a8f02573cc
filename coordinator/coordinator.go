// Package coordinator is fencegate's lease service: it hands out leases on
// resources, each acquisition with a fencing token strictly greater than
// every token issued before (invariant I5), and lets only the exact lease
// record (resource, owner, token) renew or release it (I6).
//
// The durable part lives behind Backend, implemented by the PostgreSQL store
// (adapters/postgres) for several processes and by the embedded store
// (adapters/bolt) for one. Service adds what is the same for both: request
// validation, waiting for a lease with prompt wake-ups, the OnIssue hook and
// the HTTP JSON API of docs/design.md §5. The worker side is package
// coordinator/client.
package coordinator

import (
	"context"
	"errors"
	"time"
)

// Lease is one lease record as a backend stores it.
type Lease struct {
	Resource string `json:"resource"`
	Owner    string `json:"owner"`
	Token    int64  `json:"token"`
	// ExpiresAt is when the lease ends, by the store's clock.
	ExpiresAt time.Time `json:"expires_at"`
	// Remaining is the time left when the store answered, measured by the
	// store's clock (zero or negative: expired or released). Waiters use it
	// rather than comparing ExpiresAt with this process's clock.
	Remaining time.Duration `json:"-"`
}

// Held reports whether the lease was live when the store answered.
func (l Lease) Held() bool { return l.Token > 0 && l.Remaining > 0 }

// Sentinel errors of the backends. Service turns them into the API's
// refusals (lease_held, lease_lost); every other backend error is the store
// being unavailable (503).
var (
	// ErrHeld: another owner holds a live lease. Acquire returns the
	// holder's record with it.
	ErrHeld = errors.New("lease is held by another owner")
	// ErrLost: the named lease record is not the current, live one.
	ErrLost = errors.New("lease lost: it expired or a newer lease was acquired")
)

// Backend stores leases durably. Every method answers only after its change
// is durable (committed, fsynced). Times come from one clock, the store's.
type Backend interface {
	// Acquire takes the lease on resource for owner for ttl if it is free or
	// expired, with a token greater than any issued before; fresh reports
	// that a new token was issued. If owner already holds a live lease, it
	// is extended by ttl and keeps its token (a retried acquire). If another
	// owner holds it, Acquire returns that lease and ErrHeld.
	Acquire(ctx context.Context, resource, owner string, ttl time.Duration) (l Lease, fresh bool, err error)
	// Renew extends the lease named by (resource, owner, token) to ttl from
	// now if it is current and live; otherwise ErrLost.
	Renew(ctx context.Context, resource, owner string, token int64, ttl time.Duration) (Lease, error)
	// Release ends the lease named by (resource, owner, token) if it is
	// current and live and reports whether it did. Releasing anything else
	// changes nothing.
	Release(ctx context.Context, resource, owner string, token int64) (bool, error)
	// Lease returns the current record of resource (zero Token if no lease
	// was ever issued); Held tells whether it is live.
	Lease(ctx context.Context, resource string) (Lease, error)
}

// ReleaseWatcher is implemented by backends shared by several processes
// (PostgreSQL): WatchReleases calls released with the resource of every
// lease released anywhere, and with "" when releases may have been missed
// (the notification channel reconnected), until ctx ends. Releases made
// through this process's Service wake its waiters without it.
type ReleaseWatcher interface {
	WatchReleases(ctx context.Context, released func(resource string)) error
}
