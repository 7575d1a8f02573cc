// Package server assembles one fencegate process from its configuration:
// the store, the fence, the gateway and its routes, the admin listener, and
// the listeners' lifecycle (start, reload, graceful shutdown). It is the one
// package besides config that knows the configuration's shape: options.go
// maps each section to the options of the library it configures.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/workerserver"
	"github.com/fencegate/fencegate/telemetry"
)

// Server is a running fencegate process.
type Server struct {
	log *slog.Logger

	mu  sync.Mutex
	cfg *config.Config

	closers []io.Closer // closed in reverse order by Close
	pinger  gateway.Pinger
	gw      *gateway.Gateway
	fence   gateway.Fence
	admin   *http.ServeMux
	store   gateway.Store // for S3 routes' ETag bookkeeping (s3.go)
	edges   edgeState     // TLS and API authentication (edges.go)
	// sessions are the console's browser logins (console.go); a restart
	// ends them.
	sessions *auth.Sessions

	tel *telemetry.Telemetry // metrics and tracing (telemetry.go)

	coord *coordinator.Service // lease service (coordinator.go)
	// verifying: writes' tokens are checked against the coordinator's
	// records (postgres.go); else fence.max_advance caps them.
	verifying bool

	consoleState consoleState // operator console (console.go)

	tokenSources tokenSources // routes' lock services (tokensource.go)
	raised       raisedFences // readyz_tokensource.go

	// localFence is the local fence when it keeps the store's serving
	// record (recovery.go): closed at a shutdown with no write in flight.
	localFence *gateway.LocalFence
	// recovery reports the fence's recovery after a crash or a lost
	// database session (recovery.go); nil: the fence has none.
	recovery func() gateway.RecoveryStatus

	listeners []*listener
}

type listener struct {
	name string
	ln   net.Listener
	srv  httpServer
}

// httpServer is what a listener is served by: an *http.Server, or the
// gateway's workerserver.Server in front of one.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// Options configure New.
type Options struct {
	// Logger is the process logger. Nil: a JSON logger on stderr at the
	// configured level.
	Logger *slog.Logger
	// AcceptEmptyStore starts on a store other than the one the identity
	// file names (its fences lost) and adopts it (serve --accept-empty-store).
	AcceptEmptyStore bool
	// ConfigFile is the file cfg was loaded from, shown by the console.
	ConfigFile string
	// Build is the binary's version (build_info, the console). Zero: the Go
	// build information only (telemetry.ReadBuildInfo without -ldflags).
	Build telemetry.BuildInfo
	// ReplicaReportInterval is how often a replica in fence mode shared
	// reports itself for the console's cluster view. Zero:
	// DefaultReplicaReportInterval.
	ReplicaReportInterval time.Duration
}

// New builds the process from cfg: it opens the store (refusing to start if
// it is locked or unreadable) and compiles the routes. Nothing listens yet.
func New(ctx context.Context, cfg *config.Config, opts Options) (_ *Server, err error) {
	log := opts.Logger
	if log == nil {
		log = NewLogger(os.Stderr, cfg.Log)
	}
	s := &Server{log: log, cfg: cfg, admin: http.NewServeMux(), sessions: auth.NewSessions()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	if err := s.setupTelemetry(ctx, cfg, opts.Build); err != nil {
		return nil, err
	}
	store, err := s.openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.checkIdentity(ctx, cfg, store, opts.AcceptEmptyStore); err != nil { // identity.go
		return nil, err
	}
	if err := s.setupCoordinator(cfg, store); err != nil {
		return nil, err
	}
	if s.fence, err = s.newFence(cfg, store); err != nil { // postgres.go
		return nil, err
	}
	s.store = store
	if cfg.Gateway != nil {
		s.gw = gateway.New(s.tel.TraceFence(s.fence), gateway.Options{
			TokenHeader: cfg.Gateway.TokenHeader,
			Logger:      log.With("component", "gateway"),
			LogContext:  telemetry.LogAttrs,
		})
		routes, err := BuildRoutes(cfg, log, store)
		if err != nil {
			return nil, err
		}
		if err := s.attachTokenSources(cfg, routes); err != nil {
			return nil, err
		}
		s.gw.SetRoutes(routes)
		s.gw.Observer = s.tel
		api := s.fenceAPI(cfg, store) // fenceapi.go
		api.List = s.fenceList()      // console.go
		api.Register(s.admin)
	}
	if err := s.setupEdges(ctx, cfg); err != nil {
		return nil, err
	}
	if err := s.setupConsole(cfg, opts); err != nil { // console.go
		return nil, err
	}
	s.admin.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	s.admin.HandleFunc("GET /readyz", s.readyz)
	s.admin.Handle("GET /openapi.json", api.Handler("admin"))
	return s, nil
}

// openStore opens the configured store.
func (s *Server) openStore(ctx context.Context, cfg *config.Config) (gateway.Store, error) {
	switch {
	case cfg.Store.Embedded != nil:
		st, err := bolt.Open(cfg.Store.Embedded.Path, bolt.Options{Logger: s.log.With("component", "store")})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, st)
		s.pinger = st
		s.tel.StoreCommits(func() (uint64, uint64) { c := st.Stats(); return c.Commits, c.Changes })
		s.tel.StoreSyncs(func() uint64 { return st.Stats().Syncs })
		s.tel.StoreLog(func() (int, uint64, uint64) { c := st.Stats(); return c.LogState, c.LogErrors, c.CheckpointErrors })
		return st, nil
	case cfg.Store.Etcd != nil:
		return s.openEtcd(cfg) // etcd.go
	default:
		return s.openPostgres(ctx, cfg)
	}
}

// BuildRoutes compiles the routes of cfg with their upstreams (HTTP, S3,
// GCS, Azure Blob). It is used at start, on reload, and by `fencegate
// validate`. The process's store, if given, is the record routes need
// beside the fence: the ETags of routes with `precondition: etag` (and the
// check of their upstream's conditional writes at start), the versions of
// object-store routes with `precondition: generation` or `etag`. Without
// one (`validate`) the routes are built but not checked against their
// upstreams.
func BuildRoutes(cfg *config.Config, log *slog.Logger, store ...gateway.Store) ([]*gateway.Route, error) {
	if cfg.Gateway == nil {
		return nil, nil
	}
	// Plain-http upstreams: upstreamconn's client on the handler's goroutine;
	// https ones (HTTP/2) and upgrades: net/http's.
	transport := upstreamconn.NewTransport(relay.NewTransport(nil))
	// upstream.keep_alive_writes trusts an upstream observed to read
	// bodies: its writes with a precondition or an Expect, which servers
	// answer from the head alone, still close (CloseShortcuts).
	keepWrites := upstreamconn.NewTransport(relay.NewTransport(nil))
	keepWrites.KeepBodies, keepWrites.CloseShortcuts = true, true
	// upstream.h2c: HTTP/2 frames bodies, so writes keep connections.
	h2cTransport := upstreamconn.NewH2C(relay.NewTransport(nil))
	// Object-store routes: each dialect's transport, shared by its routes.
	storeTransports := map[string]http.RoundTripper{}
	var routes []*gateway.Route
	for i, rc := range cfg.Gateway.Routes {
		var up gateway.Upstream
		switch {
		case rc.Upstream != nil:
			var shared http.RoundTripper = transport
			switch {
			case rc.Upstream.H2C:
				shared = h2cTransport
			case rc.Upstream.KeepAliveWrites:
				shared = keepWrites
			}
			tr, err := upstreamTransport(rc.Upstream, shared)
			if err != nil {
				return nil, fmt.Errorf("gateway.routes[%d] (%s): %w", i, rc.Name, err)
			}
			opts := HTTPUpstreamOptions(rc)
			opts.Transport = telemetry.Transport(tr, rc.Name)
			opts.Logger = log.With("component", "upstream", "route", rc.Name)
			if rc.Precondition == "etag" {
				opts.ETags = etagStore(store)
			}
			h, err := relay.New(opts)
			if err != nil {
				return nil, fmt.Errorf("gateway.routes[%d] (%s): %w", i, rc.Name, err)
			}
			if err := checkHTTPUpstream(rc, h, store); err != nil {
				return nil, fmt.Errorf("gateway.routes[%d] (%s): %w", i, rc.Name, err)
			}
			up = h
		default:
			dia, ok := ObjectStoreOf(rc)
			if !ok {
				return nil, fmt.Errorf("gateway.routes[%d] (%s): no upstream", i, rc.Name)
			}
			kind := rc.ObjectStore().Kind()
			tr, ok := storeTransports[kind]
			if !ok {
				tr = dia.transport()
				storeTransports[kind] = tr
			}
			var err error
			if up, err = dia.build(rc, log, telemetry.Transport(tr, rc.Name), store); err != nil {
				return nil, fmt.Errorf("gateway.routes[%d] (%s): %w", i, rc.Name, err)
			}
		}
		rt, err := gateway.NewRoute(RouteOptions(rc), up)
		if err != nil {
			return nil, fmt.Errorf("gateway.routes[%d] (%s): %w", i, rc.Name, err)
		}
		if rt.Auth, err = routeAuth(rc.Auth); err != nil {
			return nil, fmt.Errorf("gateway.routes[%d] (%s): %w", i, rc.Name, err)
		}
		routes = append(routes, rt)
	}
	return routes, nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.pinger != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.pinger.Ping(ctx); err != nil {
			// The error names the database user, host and name: it goes to
			// the log only, never to whoever can reach the probe.
			s.log.Warn("readyz: store unavailable", "err", err)
			http.Error(w, "store unavailable (details in the log)", http.StatusServiceUnavailable)
			return
		}
	}
	if kind, err := s.pingTokenSources(r.Context()); err != nil {
		s.log.Warn("readyz: token source unavailable", "source", kind, "err", err)
		http.Error(w, "token source "+kind+" unavailable: new tokens of its routes are refused (details in the log)", http.StatusServiceUnavailable)
		return
	}
	if msg, detail := s.raisedTokenSourceFences(r.Context()); msg != "" {
		s.log.Warn("readyz: " + detail)
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	if rec := s.recovering(); rec != "" {
		// Ready: only writes that could overtake one left in flight wait.
		w.Write([]byte("ready; " + rec + "\n"))
		return
	}
	w.Write([]byte("ready\n"))
}

// Gateway returns the gateway handler (nil without a gateway section).
func (s *Server) Gateway() *gateway.Gateway { return s.gw }

// Start binds every configured listener and serves in the background. A bind
// failure is returned at once and nothing keeps listening.
func (s *Server) Start(ctx context.Context) error {
	cfg := s.cfg
	if cfg.Gateway != nil {
		g := cfg.Gateway
		// No ReadTimeout/WriteTimeout: bodies stream; see listeners.go.
		// The telemetry is in every connection's base context, so
		// InstrumentHandler need not copy each request to add it.
		srv := &http.Server{
			Handler:           s.accessLog("gateway", s.tel.InstrumentHandler("gateway", s.gw)),
			BaseContext:       func(net.Listener) context.Context { return s.tel.WithContext(context.Background()) },
			ReadHeaderTimeout: g.ReadHeaderTimeout,
			IdleTimeout:       g.IdleTimeout,
			MaxHeaderBytes:    g.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		}
		if err := s.listen("gateway", g.Listen, gatewayMaxConnections(cfg), srv); err != nil {
			return err
		}
		// Plain HTTP/1.1 connections start on the fast path (workerserver);
		// TLS ones, where HTTP/2 is negotiated, stay net/http's.
		if l := s.listeners[len(s.listeners)-1]; fastPath(g) && s.tlsConfig("gateway") == nil {
			fast, err := workerserver.New(srv)
			if err != nil {
				return err
			}
			l.srv = fast
		}
	}
	if cfg.Admin.Listen != "" {
		h := s.guardAPI("admin", cfg.Admin.Listen, cfg.Admin.APIGuard, s.protect("admin", s.admin))
		if err := s.listen("admin", cfg.Admin.Listen, cfg.Admin.MaxConnections, s.apiServer(s.accessLog("admin", h), apiWriteTimeout)); err != nil {
			return err
		}
	}
	if err := s.startACME(ctx); err != nil {
		return err
	}
	if err := s.startCoordinator(); err != nil {
		return err
	}
	for _, l := range s.listeners {
		go func() {
			if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("listener failed", "listener", l.name, "err", err)
			}
		}()
		s.log.Info("listening", "listener", l.name, "addr", l.ln.Addr().String())
	}
	return nil
}

// fastPath reports whether g serves plain HTTP/1.1 on workerserver's fast path
// (gateway.fast_path: true; off by default).
func fastPath(g *config.Gateway) bool { return g.FastPath != nil && *g.FastPath }

// listen binds addr for srv, holding at most maxConns connections at once
// (listeners.go).
func (s *Server) listen(name, addr string, maxConns int, srv httpServer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		for _, l := range s.listeners {
			l.ln.Close()
		}
		s.listeners = nil
		return fmt.Errorf("%s listener: %w", name, err)
	}
	ln = limitListener(ln, maxConns, name, s.log)
	ln = s.tlsListener(name, ln)
	s.listeners = append(s.listeners, &listener{name: name, ln: ln, srv: srv})
	return nil
}

// Addr returns the bound address of a listener ("gateway", "admin",
// "coordinator"), or "" if it does not run.
func (s *Server) Addr(name string) string {
	for _, l := range s.listeners {
		if l.name == name {
			return l.ln.Addr().String()
		}
	}
	return ""
}

// Reload applies a new configuration's routes. Settings that need a restart
// (listeners, store, fence mode) are left as they are, with a warning. On
// any error the old configuration keeps serving.
func (s *Server) Reload(cfg *config.Config) (err error) {
	defer func() { s.reloaded(cfg.Redact(err)) }() // console.go
	s.mu.Lock()
	defer s.mu.Unlock()
	if (cfg.Gateway == nil) != (s.cfg.Gateway == nil) {
		return errors.New("adding or removing the gateway section needs a restart")
	}
	if err := s.checkAPIAuthReload(cfg); err != nil {
		return err
	}
	// A change of how routes build resource keys moves resources to fresh,
	// empty fences: refused unless confirmed by the route's key_version.
	changes := config.KeyChanges(s.cfg, cfg)
	if refused := slices.DeleteFunc(slices.Clone(changes), func(k config.KeyChange) bool { return k.Confirmed }); len(refused) > 0 {
		return &config.KeyChangeError{Changes: refused}
	}
	if s.gw != nil {
		routes, err := BuildRoutes(cfg, s.log, s.store)
		if err != nil {
			return err
		}
		if err := s.attachTokenSources(cfg, routes); err != nil {
			return err
		}
		s.gw.SetRoutes(routes)
		if cfg.Gateway.Listen != s.cfg.Gateway.Listen {
			s.log.Warn("gateway.listen changed; restart to apply", "old", s.cfg.Gateway.Listen, "new", cfg.Gateway.Listen)
		}
		if fastPath(cfg.Gateway) != fastPath(s.cfg.Gateway) {
			s.log.Warn("gateway.fast_path changed; restart to apply", "old", fastPath(s.cfg.Gateway), "new", fastPath(cfg.Gateway))
		}
	}
	if !sameStore(cfg.Store, s.cfg.Store) || cfg.Fence.Mode != s.cfg.Fence.Mode {
		s.log.Warn("store or fence mode changed; restart to apply")
	}
	if err := s.reloadEdges(cfg); err != nil {
		return err
	}
	for _, k := range changes {
		s.log.Warn("reload changed how resource keys are built (key_version confirms it): the route's resources start on fresh fences",
			"route", k.Route, "field", k.Field, "change", k.Msg)
	}
	s.cfg = cfg
	return nil
}

// checkAPIAuthReload refuses a reload that would leave an operator API
// without credentials on a listener bound beyond loopback. The auth of the
// admin and coordinator listeners follows each reload, their address only
// a restart: a file that moves a listener to loopback and drops its auth
// validates, yet the listener keeps serving on the address it was bound
// to. The running address is what counts.
func (s *Server) checkAPIAuthReload(cfg *config.Config) error {
	for _, a := range []struct {
		name, old, listen string
		auth              *config.Auth
		guard             config.APIGuard
	}{
		{"admin", s.cfg.Admin.Listen, cfg.Admin.Listen, cfg.Admin.Auth, cfg.Admin.APIGuard},
		{"coordinator", s.cfg.Coordinator.Listen, cfg.Coordinator.Listen, cfg.Coordinator.Auth, cfg.Coordinator.APIGuard},
	} {
		// The listener's own address, not the last file's listen: after
		// one reload that moved listen, s.cfg names an address nothing is
		// bound to.
		bound := s.Addr(a.name)
		if bound == "" {
			continue
		}
		if a.listen != a.old {
			s.log.Warn(a.name+".listen changed; restart to apply", "old", a.old, "new", a.listen)
		}
		if !config.IsLoopback(bound) && !a.auth.Enabled() && !a.guard.AllowUnauthenticated {
			return fmt.Errorf("%s.auth: the %s listener serves on %s until a restart, which is not a loopback address: "+
				"the reload would leave it without credentials (keep %s.auth until the restart, or set %s.allow_unauthenticated: true)",
				a.name, a.name, bound, a.name, a.name)
		}
	}
	return nil
}

func sameStore(a, b config.Store) bool {
	switch {
	case a.Embedded != nil && b.Embedded != nil:
		return a.Embedded.Path == b.Embedded.Path
	case a.Postgres != nil && b.Postgres != nil:
		return a.Postgres.URL == b.Postgres.URL
	}
	return false
}

// Shutdown stops accepting, waits for in-flight requests up to the
// configured shutdown timeout (or ctx), then closes the store.
func (s *Server) Shutdown(ctx context.Context) error {
	timeout := config.DefaultShutdownTimeout
	if s.cfg.Gateway != nil {
		timeout = s.cfg.Gateway.ShutdownTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, l := range s.listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.srv.Shutdown(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", l.name, err))
				mu.Unlock()
				l.srv.Close()
			}
		}()
	}
	wg.Wait()
	if err := s.waitWrites(); err != nil {
		errs = append(errs, err)
	} else if s.localFence != nil {
		// No write is left in flight: the next start needs no wait.
		ctx, cancel := context.WithTimeout(context.Background(), fencegate.DefaultStoreTimeout)
		if err := s.localFence.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	errs = append(errs, s.Close())
	return errors.Join(errs...)
}

// waitWrites waits, before the fence is closed, for the writes the gateway
// admitted and still forwards: those whose clients went away, and those
// left when the shutdown timeout cut their connections. Each ends within
// its route's timeout; until then the upstream may still apply it, and a
// fence let go of earlier (a restart's empty in-flight state, a shared
// replica's marker) could admit a newer token ahead of it.
func (s *Server) waitWrites() error {
	if s.gw == nil || s.gw.AdmittedWrites() == 0 {
		return nil
	}
	var bound time.Duration
	for _, rc := range s.cfg.Gateway.Routes {
		bound = max(bound, rc.UpstreamTimeout())
	}
	bound += fencegate.DrainMargin
	s.log.Info("waiting for admitted writes to end before closing the fence",
		"writes", s.gw.AdmittedWrites(), "bound", bound.String())
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := s.gw.WaitWrites(ctx); err != nil {
		s.log.Error("shutdown: admitted writes still in flight; they may land after a newer token's", "err", err)
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// Close releases the store and other resources without waiting.
func (s *Server) Close() error {
	var errs []error
	for _, l := range s.listeners {
		l.srv.Close()
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i].Close())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// NewLogger returns the process logger for cfg.
func NewLogger(w io.Writer, cfg config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
