package server

import (
	"context"
	"fmt"

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
