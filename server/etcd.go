package server

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
)

// openEtcd opens store.etcd (fence mode shared only, config.EtcdStore). The
// cluster may be down at start: writes are refused until it is back.
func (s *Server) openEtcd(cfg *config.Config) (*etcd.Store, error) {
	e := cfg.Store.Etcd
	st, err := etcd.OpenStore(EtcdStoreOptions(e))
	if err != nil {
		return nil, fmt.Errorf("store.etcd: %w", err)
	}
	s.closers = append(s.closers, st)
	s.pinger = st
	return st, nil
}

// newEtcdFence is the shared fence of cfg on etcd. Its Ping (for /readyz)
// also says whether this replica holds a lease it can prove alive.
func (s *Server) newEtcdFence(cfg *config.Config, st *etcd.Store, verify func(context.Context, string, int64) error) gateway.Fence {
	sf := etcd.NewSharedFence(st, etcd.SharedFenceOptions{
		LeaseTTL:       cfg.Store.Etcd.LeaseTTL,
		ForwardTimeout: maxForwardTimeout(cfg),
		Verify:         verify,
		// A process without a gateway admits no write: no lease, so its
		// death leaves nothing for drains to wait out.
		NoMarkers: cfg.Gateway == nil,
		Logger:    s.log.With("component", "fence"),
	})
	// Closed before the store (closers run in reverse), so a replica with
	// nothing in flight unregisters and revokes its lease.
	s.closers = append(s.closers, sf)
	s.pinger = sf
	s.watchRecovery(sf.Recovery)
	return sf
}

// etcdReset is `fence reset` on store.etcd. No coordinator runs on etcd,
// so no record says which tokens were issued for a resource: the lock
// service its tokens come from is asked instead. Every route that may
// produce the resource as a key must take its tokens from a lock service
// (token_source), and each of those services must vouch that `to` is the
// token of the resource's current lock holder (the create revision of the
// etcd lock key that owns the lock, the czxid of the lowest ZooKeeper lock
// node). Holders are granted the lock in token order, so every earlier
// holder's token is below `to` (refused stale once the fence is lowered)
// and every later one's above it (verified as the holder when its first
// write advances the fence): the rule of docs/design.md I7, with the lock
// service in the coordinator's place. The source is asked directly, not
// through the routes' cache of accepted tokens (a holder accepted once may
// have released the lock since).
func (s *Server) etcdReset(st *etcd.Store) func(context.Context, string, int64, string) (fencegate.FenceState, error) {
	return func(ctx context.Context, resource string, to int64, owner string) (fencegate.FenceState, error) {
		if to <= 0 {
			return fencegate.FenceState{}, fencegate.ErrResetNotPositive
		}
		srcs, err := s.resetSources(resource)
		if err != nil {
			return fencegate.FenceState{}, err
		}
		vouch := func(ctx context.Context) error {
			for _, o := range srcs {
				err := o.src.VerifyToken(ctx, resource, to)
				if _, ok := fencegate.Refusal(err); ok && !errors.As(err, new(*fencegate.TokenSourceUnavailableError)) {
					return &fencegate.Error{Code: fencegate.CodeTokenOutOfRange, Resource: resource, Token: to,
						Message: fmt.Sprintf("on store.etcd a fence is reset only to the token of the resource's current lock holder, and %s does not vouch for %d: %s", o.kind, to, err)}
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
		if err := vouch(ctx); err != nil {
			return fencegate.FenceState{}, err
		}
		// Asked again by LowerFence between its read of the record and the
		// lowering: the holder vouched for may have released the lock
		// since (the reset's process paused), and a newer one written
		// above the fence.
		return st.LowerFence(ctx, resource, to, owner, vouch)
	}
}

// resetSources are the lock services of the routes that may produce
// resource as a key, each once; a refusal if one of those routes has none,
// or if no route may produce it.
func (s *Server) resetSources(resource string) ([]*openSource, error) {
	ts := &s.tokenSources
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var srcs []*openSource
	for i := range ts.all {
		r := &ts.all[i]
		if !r.MayProduceKey(resource) {
			continue
		}
		if r.TokenSource == nil {
			return nil, &fencegate.Error{Code: fencegate.CodeTokenOutOfRange, Resource: resource,
				Message: fmt.Sprintf("route %s may write %s and its tokens come from no lock service (token_source): on store.etcd no coordinator records the tokens issued, so nothing can vouch that none above the new value was", r.Name, resource)}
		}
		o := ts.byID[r.TokenSource.Identity()]
		if o == nil {
			return nil, fencegate.Unavailable(resource, fmt.Errorf("the lock service of route %s is not open", r.Name))
		}
		if !slices.Contains(srcs, o) {
			srcs = append(srcs, o)
		}
	}
	if len(srcs) == 0 {
		return nil, &fencegate.Error{Code: fencegate.CodeTokenOutOfRange, Resource: resource,
			Message: "no route with a token_source may write " + resource + ": nothing can vouch for the new value"}
	}
	return srcs, nil
}
