package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
)

// newFence builds the fence of cfg.Fence.Mode over store and, when the lease
// coordinator shares the store, wires fence on issuance and token
// verification (both on by default then):
//
//   - local: gateway.LocalFence over the store (bbolt or PostgreSQL). An
//     issued token goes through the fence's own Advance, since the fence
//     caches the highest token in memory and would miss a raise made only
//     in the store.
//   - shared: postgres.SharedFence, several replicas over one database; an
//     issued token raises the fence row in the database.
//
// Called with s.coord already built (nil without a coordinator).
func (s *Server) newFence(cfg *config.Config, store gateway.Store) (gateway.Fence, error) {
	verify, err := s.tokenVerifier(cfg, store)
	if err != nil {
		return nil, err
	}
	var fence gateway.Fence
	if verify == nil {
		// Tokens not verified: one write may raise the fence by at most
		// fence.max_advance (gateway/ceiling.go). fence is set below,
		// before any write can call this.
		if m := cfg.Fence.MaxAdvanceOrDefault(); m >= 0 {
			verify = gateway.Ceiling(func(ctx context.Context, resource string) (fencegate.FenceState, error) {
				return fence.State(ctx, resource)
			}, m)
		}
	} else {
		s.verifying = true
	}
	if cfg.Gateway != nil {
		// Routes with a token_source verify their own tokens (the route's
		// verifier travels in the write's context); the rest as above.
		verify = gateway.RouteVerify(verify)
	}
	switch cfg.Fence.Mode {
	case "shared":
		if st, ok := store.(*etcd.Store); ok {
			fence = s.newEtcdFence(cfg, st, verify) // etcd.go
			break
		}
		st, ok := store.(*postgres.Store)
		if !ok {
			return nil, fmt.Errorf("fence.mode shared needs store.postgres, not %T", store)
		}
		markers := cfg.Fence.MarkerConns
		if cfg.Gateway == nil {
			// A coordinator alone admits no write: no marker session, so
			// its death leaves none for every drain to wait out.
			markers = -1
		}
		sf := postgres.NewSharedFence(st, postgres.SharedFenceOptions{
			ForwardTimeout: maxForwardTimeout(cfg),
			StoreTimeout:   st.Timeout,
			MarkerConns:    markers,
			Verify:         verify,
			Logger:         s.log.With("component", "fence"),
			OnRecoveryWait: s.tel.RecoveryWaited,
		})
		s.closers = append(s.closers, sf)
		s.watchRecovery(sf.Recovery)
		// A database down at start is not an error (writes are refused
		// until it is back); a pooler that cannot keep the markers is.
		ctx, cancel := context.WithTimeout(context.Background(), st.Timeout)
		err := sf.Ready(ctx)
		cancel()
		if errors.Is(err, postgres.ErrPoolMode) {
			return nil, fmt.Errorf("store.postgres.url: %w", err)
		}
		fence = sf
	default:
		members, _ := store.(gateway.MemberStore)
		opts := gateway.LocalFenceOptions{
			MaxEntries: cfg.Fence.CacheEntries,
			OnDrain:    s.tel.Drained,
			Verify:     verify,
			Members:    members,
		}
		lf, err := s.newLocalFence(cfg, store, opts)
		if err != nil {
			return nil, err
		}
		fence = lf
	}
	s.fenceOnIssue(cfg, fence, s.tel.TraceFence(fence))
	return fence, nil
}

// fenceOnIssue makes the coordinator raise the fence when it issues a token,
// so a zombie is refused from the moment a newer lease exists. The hook runs
// after the token was committed and before the worker is answered; if it
// fails the coordinator releases the new lease and answers 503.
func (s *Server) fenceOnIssue(cfg *config.Config, raw, fence gateway.Fence) {
	if s.coord == nil || !enabled(cfg.Fence.FenceOnIssue, true) {
		return
	}
	if sf, ok := raw.(*postgres.SharedFence); ok && issueRaisesRow(cfg) {
		// The acquire's own statement raised the row (Leases.RaiseFence):
		// only this replica's markers are left to tell.
		s.coord.OnIssue = func(_ context.Context, resource string, token int64, _ string) error {
			sf.Raised(resource, token)
			return nil
		}
		return
	}
	s.coord.OnIssue = func(ctx context.Context, resource string, token int64, owner string) error {
		_, err := fence.Advance(ctx, resource, token, owner)
		return err
	}
}

// issueRaisesRow reports whether the coordinator's PostgreSQL backend raises
// the fence row in its acquire statement (one round trip and one commit for
// issuance and raise): in shared mode, where that row is the whole fence.
func issueRaisesRow(cfg *config.Config) bool {
	return cfg.Coordinator.Enabled && cfg.Fence.Mode == "shared" && enabled(cfg.Fence.FenceOnIssue, true)
}

// issuedReader is the coordinator backends' read of the highest token ever
// issued for a resource (0 if none).
type issuedReader interface {
	Issued(ctx context.Context, resource string) (int64, error)
}

// tokenVerifier returns the Verify function of the fence: a token above the
// highest issued for its resource is refused as unknown_fencing_token, so a
// forged huge token cannot lock everyone out. On by default wherever the
// store holds the coordinator's records: when the coordinator runs in this
// process, and in shared fence mode (every replica shares the database the
// coordinator keeps its records in, whether or not it runs it itself).
// verify_tokens: false is the explicit choice for tokens from an external
// source; fence.max_advance then bounds each write instead.
func (s *Server) tokenVerifier(cfg *config.Config, store gateway.Store) (func(context.Context, string, int64) error, error) {
	if !enabled(cfg.Fence.VerifyTokens, s.coord != nil || cfg.SharedRecords()) {
		return nil, nil
	}
	issued := leaseRecords(store)
	if issued == nil {
		return nil, fmt.Errorf("fence.verify_tokens: store %T keeps no lease records", store)
	}
	// The highest token issued for a resource, read from the store, is one
	// the store must stand above from then on (the store guard's check).
	var guard *postgres.Guard
	if st, ok := store.(*postgres.Store); ok {
		guard = st.Guard()
	}
	return func(ctx context.Context, resource string, token int64) error {
		n, err := issued.Issued(ctx, resource)
		if err != nil {
			return err
		}
		guard.Saw(n)
		if token > n {
			return &fencegate.UnknownTokenError{Resource: resource, Token: token,
				Why: fmt.Sprintf("token %d was never issued for %s (the highest issued is %d)", token, resource, n)}
		}
		return nil
	}, nil
}

func enabled(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// maxForwardTimeout is the longest upstream timeout of any route: the
// shared fence keeps the database from ending an in-flight marker before the
// forward it protects has timed out.
func maxForwardTimeout(cfg *config.Config) time.Duration {
	var d time.Duration
	if cfg.Gateway != nil {
		for i := range cfg.Gateway.Routes {
			d = max(d, cfg.Gateway.Routes[i].UpstreamTimeout(), cfg.Gateway.Routes[i].DrainTimeout)
		}
	}
	return d
}
