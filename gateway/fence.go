package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate"
)

// A Fence decides which writes may reach the upstream. The gateway's request
// path talks only to this interface; LocalFence implements it over any Store,
// and the PostgreSQL adapter implements it for several gateway replicas.
type Fence interface {
	// Admit returns a Permit if a write for w.Resource with w.Token may be
	// forwarded now, after making any advance of the highest token durable
	// (I3) and after every older in-flight write has drained (I2). Refusals
	// are *fencegate.Error (stale, draining, unavailable).
	Admit(ctx context.Context, w Write) (Permit, error)
	// State reports the fence record of one resource (zero Highest if none).
	State(ctx context.Context, resource string) (fencegate.FenceState, error)
	// Advance raises the highest token of resource to token by hand (an
	// operator fencing out a known zombie). It never lowers it (I7).
	Advance(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error)
}

// A Write is one fenced request as the fence sees it.
type Write struct {
	Resource string
	Token    int64
	Owner    string // the authenticated identity, if any; for bookkeeping only
	// Abort, if set, cancels the forward of this write with a cause, which
	// decides the answer: ErrSuperseded when a newer token advanced while
	// this write's request body had not been fully sent upstream (an
	// incomplete request is never applied, so aborting it is safe and
	// spares the newer writer the wait; answered as stale), or a
	// *fencegate.Error the client is answered with (a shared fence that lost
	// the database session guarding the write, or its forward timeout).
	Abort func(cause error)
	// DrainTimeout bounds the wait for older in-flight writes (the route's
	// drain_timeout); zero means the fence's default.
	DrainTimeout time.Duration
	// BodySent reports whether the request body has been fully handed to the
	// upstream connection. Nil means "yes" (no abort possible).
	BodySent func() bool
}

// A Permit is held while an admitted write is in flight. Release must be
// called exactly once, after the upstream has answered (or failed).
type Permit interface {
	Release()
}

// Store is the durable record behind a LocalFence. Implementations must make
// AdvanceFence durable (fsynced or committed) before returning.
type Store interface {
	// LoadFence returns the record for resource; a zero Highest if none.
	LoadFence(ctx context.Context, resource string) (fencegate.FenceState, error)
	// AdvanceFence raises highest to token if token is greater, durably,
	// and returns the record as stored afterwards (whose Highest may exceed
	// token if a newer one was already recorded). It never lowers highest.
	AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error)
}

// Pinger is implemented by stores that can report whether they are usable;
// /readyz uses it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ErrSuperseded is the Abort cause of a write whose body was still being
// sent when a newer token advanced its fence.
var ErrSuperseded = errors.New("a newer fencing token was accepted while this request body was still being sent")
