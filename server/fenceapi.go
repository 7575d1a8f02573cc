package server

import (
	"context"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
)

// tokenRaiser is the coordinator backends' raise of the token counter
// (sequence) for hand advances.
type tokenRaiser interface {
	RaiseSequence(ctx context.Context, token int64) error
}

// fenceResetter is the stores' reset of a fence under the lease records'
// agreement (docs/design.md I7).
type fenceResetter interface {
	ResetFence(ctx context.Context, resource string, to int64, owner string) (fencegate.FenceState, error)
}

// leases is what the fence API and the token checks read of the
// coordinator's lease records.
type leases interface {
	issuedReader
	tokenRaiser
}

// leaseRecords returns the lease records kept on store (the coordinator's,
// whether or not it runs in this process); nil if the store keeps none.
func leaseRecords(store any) leases {
	switch st := store.(type) {
	case *postgres.Store:
		return postgres.NewLeases(st)
	case *bolt.Store:
		return bolt.NewLeases(st)
	}
	return nil
}

// advanceLimit is the fence.max_advance ceiling of a raise by hand (the
// fence API's advance, fence import and rebuild): above the highest token
// issued for the resource when tokens are verified (issued non-nil),
// above the fence's highest (state) otherwise. A negative maxAdv is no
// ceiling.
func advanceLimit(maxAdv int64, verifying bool, issued issuedReader, state func(context.Context, string) (fencegate.FenceState, error)) func(context.Context, string, int64) error {
	if verifying && issued != nil {
		return func(ctx context.Context, resource string, token int64) error {
			n, err := issued.Issued(ctx, resource)
			if err != nil {
				return fencegate.Unavailable(resource, err)
			}
			return gateway.CheckAdvance(resource, token, n, maxAdv, "the highest token issued")
		}
	}
	return gateway.Ceiling(state, maxAdv)
}

// ImportLimit is advanceLimit for a store opened by the command line
// (fence import and rebuild, the gateway stopped or elsewhere): the same
// ceiling as POST /v1/fences/advance under cfg, over the store's records.
// Nil when fence.max_advance is negative (no ceiling).
func ImportLimit(cfg *config.Config, store gateway.Store) func(context.Context, string, int64) error {
	maxAdv := cfg.Fence.MaxAdvanceOrDefault()
	if maxAdv < 0 {
		return nil
	}
	verifying := enabled(cfg.Fence.VerifyTokens, cfg.Coordinator.Enabled || cfg.SharedRecords())
	var issued issuedReader
	if l := leaseRecords(store); l != nil {
		issued = l
	}
	return advanceLimit(maxAdv, verifying, issued, func(ctx context.Context, resource string) (fencegate.FenceState, error) {
		st, err := store.LoadFence(ctx, resource)
		if err != nil {
			return st, fencegate.Unavailable(resource, err)
		}
		return st, nil
	})
}

// fenceAPI is the admin listener's fence API over the process's fence:
//
//   - advance: capped by fence.max_advance above the highest token issued
//     (tokens verified) or above the fence's highest (not verified); the
//     token counter is raised first, so the next lease is above the
//     advanced value.
//   - reset: only with token verification (the coordinator's records are
//     what makes a lowering safe) and a store that can check them in the
//     same transaction.
func (s *Server) fenceAPI(cfg *config.Config, store gateway.Store) *gateway.FenceAPI {
	api := &gateway.FenceAPI{
		Fence: s.fence,
		Log:   s.log.With("component", "admin"),
		Operator: func(r *http.Request) string {
			if id, ok := auth.IdentityFrom(r.Context()); ok {
				return id.Owner
			}
			return ""
		},
	}
	var issued issuedReader
	if l := leaseRecords(store); l != nil {
		issued, api.RaiseTokens = l, l.RaiseSequence
	}
	api.Limit = advanceLimit(cfg.Fence.MaxAdvanceOrDefault(), s.verifying, issued, s.fence.State)
	if es, ok := store.(*etcd.Store); ok {
		api.Reset = s.etcdReset(es) // etcd.go
		return api
	}
	rs, canReset := store.(fenceResetter)
	switch {
	case !s.verifying:
		api.ResetUnavailable = "tokens are not verified (fence.verify_tokens), so the coordinator cannot vouch that no token above the new value was issued"
	case !canReset:
		api.ResetUnavailable = "the store cannot reset fences"
	default:
		if lf, ok := s.fence.(*gateway.LocalFence); ok {
			api.Reset = func(ctx context.Context, resource string, to int64, owner string) (fencegate.FenceState, error) {
				return lf.Lower(ctx, resource, func(ctx context.Context) (fencegate.FenceState, error) {
					return rs.ResetFence(ctx, resource, to, owner)
				})
			}
		} else {
			// The shared fence keeps no state in memory.
			api.Reset = rs.ResetFence
		}
	}
	return api
}
