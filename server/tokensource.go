package server

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/adapters/zookeeper"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
)

// tokenSource is a lock service outside fencegate whose tokens routes
// accept (adapters/etcd, adapters/zookeeper).
type tokenSource interface {
	gateway.TokenVerifier
	Ping(ctx context.Context) error
	Close() error
}

// tokenSources are the lock services the routes' token_source name, one
// client each (several routes may share one), kept open across reloads.
type tokenSources struct {
	mu   sync.Mutex
	byID map[string]*openSource
	// routes are the configured routes that have a token_source; all are
	// every configured route (a reset on store.etcd asks them, etcd.go).
	routes, all []config.Route
}

type openSource struct {
	kind     string
	src      tokenSource
	verifier *gateway.VerifiedCache
}

// attachTokenSources gives each route of cfg with a token_source the
// verifier of its lock service, opening the services not open yet. routes
// are BuildRoutes(cfg)'s, one per configured route in order.
func (s *Server) attachTokenSources(cfg *config.Config, routes []*gateway.Route) error {
	if cfg.Gateway == nil {
		return nil
	}
	ts := &s.tokenSources
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for i, rc := range cfg.Gateway.Routes {
		if rc.TokenSource == nil {
			continue
		}
		id := rc.TokenSource.Identity()
		o := ts.byID[id]
		if o == nil {
			src, err := openTokenSource(rc.TokenSource)
			if err != nil {
				return fmt.Errorf("gateway.routes[%d] (%s).token_source: %w", i, rc.Name, err)
			}
			o = &openSource{kind: rc.TokenSource.Kind(), src: src, verifier: &gateway.VerifiedCache{Verifier: src}}
			if ts.byID == nil {
				ts.byID = make(map[string]*openSource)
			}
			ts.byID[id] = o
			s.closers = append(s.closers, src)
		}
		routes[i].Tokens = o.verifier
	}
	ts.all = slices.Clone(cfg.Gateway.Routes)
	ts.routes = slices.DeleteFunc(slices.Clone(cfg.Gateway.Routes), func(r config.Route) bool { return r.TokenSource == nil })
	if s.coord != nil && s.coord.Foreign == nil { // set once, before serving
		s.coord.Foreign = s.foreignSource
	}
	return nil
}

// foreignSource names the lock service of the first route with a
// token_source that may produce resource as a key ("" if none): the
// coordinator refuses leases on it.
func (s *Server) foreignSource(resource string) string {
	ts := &s.tokenSources
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for i := range ts.routes {
		if r := &ts.routes[i]; r.MayProduceKey(resource) {
			return r.TokenSource.Kind() + " (route " + r.Name + ")"
		}
	}
	return ""
}

func openTokenSource(ts *config.TokenSource) (tokenSource, error) {
	if e := ts.Etcd; e != nil {
		return etcd.New(etcd.Options{Client: EtcdClientOptions(e.Endpoints, e.Username, e.Password, e.TLS), Prefix: e.Prefix, Timeout: e.Timeout})
	}
	z := ts.ZooKeeper
	return zookeeper.New(zookeeper.Options{Servers: z.Servers, Path: z.Path, SessionTimeout: z.SessionTimeout, Timeout: z.Timeout})
}

// pingTokenSources reports the first lock service that does not answer,
// for /readyz: while it is down no new token of its routes is admitted.
func (s *Server) pingTokenSources(ctx context.Context) (kind string, err error) {
	ts := &s.tokenSources
	ts.mu.Lock()
	ids := make([]string, 0, len(ts.byID))
	for id := range ts.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	srcs := make([]*openSource, len(ids))
	for i, id := range ids {
		srcs[i] = ts.byID[id]
	}
	ts.mu.Unlock()
	for _, o := range srcs {
		if err := o.src.Ping(ctx); err != nil {
			return o.kind, err
		}
	}
	return "", nil
}
