package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"

	"github.com/caddyserver/certmagic"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/listentls"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
)

// edgeState is the process's TLS and the authentication of its APIs.
type edgeState struct {
	tls *listentls.Manager
	// API authenticators by listener name ("admin", "coordinator"); a
	// reload swaps them, which is how a removed key stops working.
	apiAuth map[string]*atomic.Pointer[auth.Authenticator]
}

// setupEdges prepares TLS (loading files now; ACME certificates are obtained
// once the listeners serve) and the API authenticators.
func (s *Server) setupEdges(ctx context.Context, cfg *config.Config) error {
	s.edges.apiAuth = map[string]*atomic.Pointer[auth.Authenticator]{
		"admin": {}, "coordinator": {},
	}
	if err := s.setAPIAuth(cfg); err != nil {
		return err
	}
	opts := TLSOptions(cfg.TLS)
	opts.Logger = s.log
	if cfg.TLS.Mode == "acme" {
		storage, err := s.certStorage(ctx, cfg)
		if err != nil {
			return err
		}
		opts.Storage = storage
	}
	m, err := listentls.New(opts)
	if err != nil {
		return err
	}
	s.edges.tls = m
	s.closers = append(s.closers, m)
	return nil
}

// certStorage is where ACME state lives: PostgreSQL when the store is
// PostgreSQL (replicas share it), else files beside the embedded store.
func (s *Server) certStorage(ctx context.Context, cfg *config.Config) (certmagic.Storage, error) {
	if p := cfg.Store.Postgres; p != nil {
		// A small pool of its own: certificate work must never wait behind
		// (or hold up) fence transactions.
		db, err := postgres.Open(ctx, p.URL, postgres.Options{MaxConns: 4, Timeout: p.Timeout})
		if err != nil {
			return nil, fmt.Errorf("tls certificate storage: %w", err)
		}
		s.closers = append(s.closers, db)
		return postgres.NewCertStorage(db), nil
	}
	dir := "./data"
	if e := cfg.Store.Embedded; e != nil {
		dir = filepath.Dir(e.Path)
	}
	return &certmagic.FileStorage{Path: filepath.Join(dir, "acme")}, nil
}

func (s *Server) setAPIAuth(cfg *config.Config) error {
	for name, a := range map[string]*config.Auth{"admin": cfg.Admin.Auth, "coordinator": cfg.Coordinator.Auth} {
		au, err := auth.New(AuthOptions(a))
		if err != nil {
			return fmt.Errorf("%s.auth: %w", name, err)
		}
		s.edges.apiAuth[name].Store(au)
		if name == "admin" {
			// A console session dies with its key, even if the key
			// comes back in a later reload.
			s.sessions.Retain(au)
		}
	}
	return nil
}

// reloadEdges applies a reloaded configuration's API keys. TLS settings
// need a restart (certificate files are picked up by themselves).
func (s *Server) reloadEdges(cfg *config.Config) error {
	if s.edges.apiAuth == nil {
		return nil
	}
	return s.setAPIAuth(cfg)
}

// protect requires the credentials of the named API's auth block (admin,
// coordinator) on h. /healthz and /readyz stay open: probes carry no
// credentials.
func (s *Server) protect(name string, h http.Handler) http.Handler {
	p := s.edges.apiAuth[name]
	if p == nil {
		return h
	}
	if name == "admin" {
		h = scopedAdmin(h)
	}
	if name == "admin" {
		// The console's login form and its stylesheet are open; a session
		// cookie opens the console's pages and JSON (GET only).
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			auth.SessionMiddleware(p.Load(), s.sessions, "/login", h, "/healthz", "/readyz",
				"/login", "/logout", "/console/static/style.css", "/console/static/console.js").ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Middleware(p.Load(), h, "/healthz", "/readyz").ServeHTTP(w, r)
	})
}

// scopedAdmin keeps an admin identity limited to resource prefixes to the
// endpoints that act on the one resource the request names, which the auth
// middleware checked: the fence record and page of ?resource=R, and the
// advance and reset of the body's resource. Listings (fences, leases,
// refusals, routes, status, metrics) span every resource and would show
// such an identity what is outside its prefixes; the fence record without
// ?resource= is the fences listing.
func scopedAdmin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := auth.IdentityFrom(r.Context()); ok && id.Prefixes != nil {
			ok := false
			switch r.URL.Path {
			case "/v1/fences", "/fence":
				ok = r.URL.Query().Get("resource") != ""
			case "/v1/fences/advance", "/v1/fences/reset":
				ok = true
			}
			if !ok {
				httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeForbidden,
					"%s is limited to resource prefixes: it may read one fence (?resource=R), advance or reset one, not %s", id.Owner, r.URL.Path))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// tlsListener wraps a listener named in tls.listeners with TLS.
func (s *Server) tlsListener(name string, ln net.Listener) net.Listener {
	if tc := s.tlsConfig(name); tc != nil {
		return tls.NewListener(ln, tc)
	}
	return ln
}

// tlsConfig is the TLS configuration of listener name; nil if it serves
// plain TCP.
func (s *Server) tlsConfig(name string) *tls.Config {
	if s.edges.tls == nil {
		return nil
	}
	tc := s.edges.tls.ServerConfig()
	if tc == nil {
		return nil
	}
	for _, l := range s.cfg.TLS.Listeners {
		if l == name {
			return tc
		}
	}
	return nil
}

// startACME binds tls.acme.http_listen (HTTP-01 answers and the redirect to
// HTTPS) and starts obtaining certificates in the background; it runs once
// the other listeners are bound, so the CA can connect back to them.
func (s *Server) startACME(ctx context.Context) error {
	a := s.cfg.TLS.ACME
	if s.edges.tls == nil || s.cfg.TLS.Mode != "acme" || a == nil {
		return nil
	}
	httpsPort := 0
	if _, p, err := net.SplitHostPort(s.Addr("gateway")); err == nil {
		fmt.Sscan(p, &httpsPort)
	}
	s.edges.tls.SetTLSALPNPort(httpsPort)
	if a.HTTPListen != "" {
		if err := s.listen("acme-http", a.HTTPListen, acmeMaxConnections, s.apiServer(s.edges.tls.HTTPHandler(httpsPort), apiWriteTimeout)); err != nil {
			return err
		}
	}
	return s.edges.tls.Manage(ctx)
}

// upstreamTransport is the transport of one upstream: the shared one, or
// with upstream.tls a transport of its own with that TLS client.
func upstreamTransport(u *config.Upstream, shared http.RoundTripper) (http.RoundTripper, error) {
	if u.TLS == nil {
		return shared, nil
	}
	tc, err := upstreamconn.TLSConfig(UpstreamTLSOptions(u.TLS))
	if err != nil {
		return nil, err
	}
	return relay.NewTransport(tc), nil
}

// routeAuth is a route's Authenticator; a nil interface when the route
// asks for no credentials.
func routeAuth(a *config.Auth) (gateway.Authenticator, error) {
	au, err := auth.New(AuthOptions(a))
	if err != nil || au == nil {
		return nil, err
	}
	return au, nil
}
