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
	// spares the newer writer the wait; answered as stale), or an error
	// whose fencegate.Refusal the client is answered with (a shared fence
	// that lost the store session guarding the write, or its forward
	// timeout).
	Abort func(cause error)
	// DrainTimeout bounds the wait for older in-flight writes (the route's
	// drain_timeout); zero means the fence's default.
	DrainTimeout time.Duration
	// BodySent reports whether the request body has been fully handed to the
	// upstream connection. Nil means "yes" (no abort possible).
	BodySent func() bool
	// Scope says which fences around Resource the write is checked against
	// (hierarchical keys); the zero value checks Resource alone.
	Scope Scope
	// Verified: the token was verified for the key Resource stands for,
	// admitted before it in the same request (Resource is that key's
	// TreeKey, which no lease names); the fence does not verify it again.
	Verified bool
}

// Scope is how a write relates to the keys around its resource in a
// hierarchy of keys, where the keys below a key K (its members) are those
// that start with K+"/" (resource.Parents lists the keys above one). A
// request that changes a collection and may change its members (a WebDAV
// DELETE or MOVE of a collection, an S3 bucket-level write) is admitted on
// its key with ScopeTree; a request that changes one member is admitted on
// its own key and, with ScopeMember, on the key of every collection above
// it. Together they give: a write is refused when a newer token was
// accepted for a key above it or, with ScopeTree, below it; it waits for
// older writes in flight on those keys (I2); and a collection write raises
// the collection's key, so a stale member write after it is refused. All
// of a request's admissions go in key order (a collection's key sorts
// before its members'), which keeps waits free of cycles.
type Scope uint8

const (
	// ScopeKey checks the write against Resource's own fence only.
	ScopeKey Scope = iota
	// ScopeTree checks the write against Resource's fence and the
	// fences of every key below it: refused if any holds a newer token,
	// and it waits for older writes in flight on any of them. It advances
	// Resource's fence like ScopeKey.
	ScopeTree
	// ScopeMember admits a write to a key below Resource: it is refused
	// if Resource's fence is newer than the token, waits for older
	// ScopeKey and ScopeTree writes in flight on Resource, and records the
	// token as accepted below Resource (so a later, older ScopeTree write
	// of Resource is refused). It never advances Resource's own fence.
	// The write must also be admitted on its own key.
	ScopeMember
)

// TreeFence is implemented by fences that decide a write's ScopeMember
// admissions together with its own key's (the shared fence, which reads
// the collections above a key only once the write's own in-flight marker
// is held: docs/design.md §4). The gateway then hands AdmitTree each key
// the request writes, with the keys above it that it would otherwise admit
// with ScopeMember; the one permit covers them all.
type TreeFence interface {
	// AdmitTree admits w (ScopeKey or ScopeTree) on w.Resource and, with
	// ScopeMember, on each key in above (keys above w.Resource, in key
	// order).
	AdmitTree(ctx context.Context, w Write, above []string) (Permit, error)
}

// MemberStore is implemented by stores that can report the highest token
// recorded for the keys below a collection; a LocalFence needs it for
// ScopeTree writes (it asks once per key while the key is cached).
type MemberStore interface {
	// HighestBelow returns the highest token of every record whose
	// resource starts with prefix (0 if none).
	HighestBelow(ctx context.Context, prefix string) (int64, error)
}

// A Permit is held while an admitted write is in flight. Release must be
// called exactly once, after the upstream has answered (or failed).
type Permit interface {
	Release()
}

// LivePermit is implemented by permits that can stop holding while their
// write is forwarded: a shared fence's replica that can no longer prove
// alive the etcd lease its marker hangs on (a process paused past the
// lease's TTL, whose marker other replicas may have found gone). The
// gateway asks Live before each piece of a streamed body it sends on, so
// such a write sends nothing more and the upstream gets an incomplete
// request, even when the process resumes before the fence's own abort
// runs.
type LivePermit interface {
	Live() error
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
