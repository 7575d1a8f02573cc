package server

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/gateway"
)

// setupCoordinator builds the lease service on the process's store when
// coordinator.enabled; startCoordinator binds its listener in Start.
func (s *Server) setupCoordinator(cfg *config.Config, store gateway.Store) error {
	if !cfg.Coordinator.Enabled {
		return nil
	}
	var backend coordinator.Backend
	switch st := store.(type) {
	case *bolt.Store:
		backend = bolt.NewLeases(st)
	case *postgres.Store:
		ls := postgres.NewLeases(st)
		ls.RaiseFence = issueRaisesRow(cfg) // fence on issuance in the acquire's statement
		backend = ls
	default:
		return fmt.Errorf("coordinator: store %T cannot keep leases", store)
	}
	c := cfg.Coordinator
	s.coord = &coordinator.Service{
		Backend:    s.tel.LeaseBackend(backend, s.log.With("component", "coordinator")),
		DefaultTTL: c.DefaultTTL,
		MaxTTL:     c.MaxTTL,
		MaxWait:    c.MaxWait,
		Logger:     s.log.With("component", "coordinator"),
	}
	// The backend may be wrapped for tracing; LISTEN/NOTIFY is the
	// unwrapped backend's.
	if w, ok := backend.(coordinator.ReleaseWatcher); ok {
		s.coord.Releases = w
	}
	s.coord.Start()
	s.closers = append(s.closers, s.coord)
	return nil
}

// Coordinator returns the lease service (nil unless coordinator.enabled),
// e.g. for shared fence mode to set its OnIssue hook before Start.
func (s *Server) Coordinator() *coordinator.Service { return s.coord }

func (s *Server) startCoordinator() error {
	if s.coord == nil {
		return nil
	}
	c := s.cfg.Coordinator
	h := s.guardAPI("coordinator", c.Listen, c.APIGuard, s.protect("coordinator", s.coord.Handler()))
	return s.listen("coordinator", c.Listen, c.MaxConnections, s.apiServer(s.tel.InstrumentCoordinator(h), c.WriteTimeout()))
}

// openPostgres is the postgres branch of openStore: the pool (which
// reconnects by itself after an outage) with pending migrations applied.
func (s *Server) openPostgres(ctx context.Context, cfg *config.Config) (gateway.Store, error) {
	p := cfg.Store.Postgres
	st, err := postgres.Open(ctx, p.URL, postgres.Options{
		MaxConns: p.MaxConns, Timeout: p.Timeout,
		Logger:      s.log.With("component", "store"),
		AutoRecover: p.OnRegression == "recover",
		// The routes' token sources as configured at start, and as
		// reloaded since.
		Foreign: func(r string) bool { return cfg.TokenSourceKey(r) || s.foreignSource(r) != "" },
	})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, st)
	s.pinger = st
	s.watchStore(st)
	return st, nil
}
