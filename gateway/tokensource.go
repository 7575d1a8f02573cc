package gateway

import (
	"context"
	"sync"

	"github.com/fencegate/fencegate"
)

// A TokenVerifier checks, against the lock service that issued it, that a
// token is its lock holder's for resource: the create revision of the
// etcd lock key that owns the lock, the czxid of the ZooKeeper lock node
// that is lowest. A route with one
// (Route.Tokens) has its new tokens checked by it instead of the fence's
// default verifier (fencegate's own coordinator's records, or
// fence.max_advance). It is consulted only when a token would advance the
// fence, never for a repeated one.
//
// A *fencegate.Error it returns is the refusal (unknown_fencing_token for a
// token the service never issued for resource, not_lock_holder for one
// whose sender it cannot show holds or held the lock,
// token_source_unavailable when the service cannot be asked); any other
// error refuses the write with fence_unavailable.
type TokenVerifier interface {
	VerifyToken(ctx context.Context, resource string, token int64) error
}

type tokenVerifierKey struct{}

// withTokenVerifier carries the route's verifier to the fence's Verify
// (RouteVerify), which sees only the context of the write.
func withTokenVerifier(ctx context.Context, v TokenVerifier) context.Context {
	if v == nil {
		return ctx
	}
	return context.WithValue(ctx, tokenVerifierKey{}, v)
}

// FromTokenSource reports whether the write whose context ctx is came
// through a route whose tokens come from a lock service outside fencegate
// (Route.Tokens): its tokens are that service's numbers, not the
// coordinator's, so a floor on the coordinator's tokens (a store's
// recovery) says nothing about them.
func FromTokenSource(ctx context.Context) bool {
	_, ok := ctx.Value(tokenVerifierKey{}).(TokenVerifier)
	return ok
}

// RouteVerify returns the Verify function of a fence (LocalFenceOptions.Verify,
// the shared fence's) that checks a write with the TokenVerifier of the
// route it came through, and every other token (routes without one, hand
// advances) with def; def nil accepts them.
func RouteVerify(def func(ctx context.Context, resource string, token int64) error) func(context.Context, string, int64) error {
	return func(ctx context.Context, resource string, token int64) error {
		if v, ok := ctx.Value(tokenVerifierKey{}).(TokenVerifier); ok {
			return v.VerifyToken(ctx, resource, token)
		}
		if def == nil {
			return nil
		}
		return def(ctx, resource, token)
	}
}

// VerifiedCache remembers the tokens its TokenVerifier accepted, so that a
// token asked about again (by a fence that evicted the resource, a shared
// fence's other writer, a write racing the first one's advance) costs no
// round trip to the lock service. Refusals are not remembered: a lock key
// may appear a moment after a worker's first write raced it.
type VerifiedCache struct {
	Verifier TokenVerifier
	// Size bounds the number of resources remembered; 0 means 10000.
	Size int

	mu   sync.Mutex
	last map[string]int64 // resource → the highest token verified for it
}

var _ TokenVerifier = (*VerifiedCache)(nil)

// VerifyToken implements TokenVerifier.
func (c *VerifiedCache) VerifyToken(ctx context.Context, resource string, token int64) error {
	c.mu.Lock()
	hit := c.last[resource] == token
	c.mu.Unlock()
	if hit {
		return nil
	}
	if err := c.Verifier.VerifyToken(ctx, resource, token); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	size := c.Size
	if size <= 0 {
		size = 10000
	}
	if c.last == nil || len(c.last) >= size {
		// Forgetting everything at once keeps this a map and a lock; a
		// forgotten token costs one more read, never a wrong answer.
		c.last = make(map[string]int64)
	}
	if token > c.last[resource] {
		c.last[resource] = token
	}
	return nil
}

// CodeNotLockHolder is fencegate.CodeNotLockHolder, beside the other codes
// now (httprefusal gives each its status).
//
// Deprecated: use fencegate.CodeNotLockHolder.
const CodeNotLockHolder = fencegate.CodeNotLockHolder

// NotLockHolder is the refusal of a token that is not the lock holder's;
// why says what the lock service showed, for the client's message.
func NotLockHolder(resource string, token int64, why string) *fencegate.Error {
	return &fencegate.Error{Code: CodeNotLockHolder, Message: why,
		Resource: resource, Token: token}
}
