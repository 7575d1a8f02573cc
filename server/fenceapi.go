package server

import (
	"context"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
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
	var (
		issued issuedReader
		raiser tokenRaiser
	)
	switch st := store.(type) {
	case *postgres.Store:
		l := postgres.NewLeases(st)
		issued, raiser = l, l
	case *bolt.Store:
		l := bolt.NewLeases(st)
		issued, raiser = l, l
	}
	if raiser != nil {
		api.RaiseTokens = raiser.RaiseSequence
	}
	maxAdv := cfg.Fence.MaxAdvanceOrDefault()
	fence := s.fence
	if s.verifying && issued != nil {
		api.Limit = func(ctx context.Context, resource string, token int64) error {
			n, err := issued.Issued(ctx, resource)
			if err != nil {
				return fencegate.Unavailable(resource, err)
			}
			return gateway.CheckAdvance(resource, token, n, maxAdv, "the highest token issued")
		}
	} else {
		api.Limit = func(ctx context.Context, resource string, token int64) error {
			st, err := fence.State(ctx, resource)
			if err != nil {
				return err
			}
			return gateway.CheckAdvance(resource, token, st.Highest, maxAdv, "the fence's highest token")
		}
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
