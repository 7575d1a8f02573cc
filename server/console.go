package server

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/telemetry"
)

// consoleState is what the operator console reads beyond the gateway: the
// recent refusals, the start time and the last reload's result.
type consoleState struct {
	console *console.Console
	recent  *telemetry.Refusals
	started time.Time

	mu     sync.Mutex
	reload console.Reload
}

// setupConsole registers the operator console and its JSON API on the
// admin mux (behind the admin listener's auth, like every admin endpoint),
// starts recording refusals, and initializes the metrics' label sets.
func (s *Server) setupConsole(cfg *config.Config, opts Options) error {
	cs := &s.consoleState
	cs.started = time.Now()
	cs.recent = telemetry.NewRefusals(cfg.Admin.RecentRefusals)
	c := &console.Console{
		Sessions: consoleSessions{s},
		Refusals: cs.recent,
		Routes:   consoleRoutes{s},
		Status:   consoleStatus{s, opts.ConfigFile},
		JaegerUI: cfg.Admin.JaegerUI,
		Log:      s.log.With("component", "console"),
	}
	if s.gw != nil {
		c.Fence = s.fence
		c.Fences, _ = s.store.(console.FenceLister)
		c.InFlight, _ = s.fence.(console.InFlightCounter)
		s.gw.Observer = &observer{tel: s.tel, recent: cs.recent}
		s.tel.Ops.SetInFlight(func() map[string]int64 {
			out := map[string]int64{}
			for _, rt := range s.gw.Routes() {
				out[rt.Name] += rt.InFlight()
			}
			return out
		})
	}
	if s.coord != nil {
		// The coordinator shares the process's store; listing needs no
		// token drawing, so a backend of its own is as good as the
		// service's.
		switch st := s.store.(type) {
		case *bolt.Store:
			c.Leases = bolt.NewLeases(st)
		case *postgres.Store:
			c.Leases = postgres.NewLeases(st)
		}
	}
	if st := s.replicaStore(cfg); st != nil {
		r := newReplicas(s, st, opts.ReplicaReportInterval)
		s.closers = append(s.closers, r)
		c.Cluster = r
	}
	cs.console = c
	s.tel.InitLabels(routeNames(cfg))
	return c.Register(s.admin)
}

// fenceList serves GET /v1/fences without ?resource= (the console's
// listing); the fence API keeps ?resource=R.
func (s *Server) fenceList() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.consoleState.console.FenceList().ServeHTTP(w, r)
	})
}

// reloaded records a reload's result for the console and the metrics.
func (s *Server) reloaded(err error) {
	s.tel.Ops.Reloaded(err)
	r := console.Reload{Time: time.Now(), OK: err == nil}
	if err != nil {
		r.Error = err.Error()
	} else {
		s.mu.Lock()
		names := routeNames(s.cfg)
		s.mu.Unlock()
		s.tel.InitLabels(names)
	}
	s.consoleState.mu.Lock()
	s.consoleState.reload = r
	s.consoleState.mu.Unlock()
}

// ReloadFailed records a reload that failed before Reload ran (the file
// did not load or validate): the previous configuration keeps serving. The
// message is redacted of the running configuration's secrets, as the
// console shows it.
func (s *Server) ReloadFailed(err error) {
	s.mu.Lock()
	cur := s.cfg
	s.mu.Unlock()
	s.reloaded(cur.Redact(err))
}

func routeNames(cfg *config.Config) []string {
	if cfg.Gateway == nil {
		return nil
	}
	names := make([]string, len(cfg.Gateway.Routes))
	for i, r := range cfg.Gateway.Routes {
		names[i] = r.Name
	}
	return names
}

// observer is the gateway's Observer: metrics and tracing, the recent
// refusals, and the access log's view of the request (access.go).
type observer struct {
	tel    *telemetry.Telemetry
	recent *telemetry.Refusals
}

func (o *observer) Observe(ctx context.Context, out *gateway.Outcome) {
	o.tel.Observe(ctx, out)
	o.recent.Observe(ctx, out)
	if e := accessEntryFrom(ctx); e != nil {
		e.observed(ctx, out)
	}
}

type consoleRoutes struct{ s *Server }

func (cr consoleRoutes) Routes() []console.Route {
	s := cr.s
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	if cfg.Gateway == nil {
		return nil
	}
	counts := s.tel.Metrics.RequestCounts()
	latency := s.tel.Metrics.UpstreamLatencies()
	inflight := map[string]int64{}
	if s.gw != nil {
		for _, rt := range s.gw.Routes() {
			inflight[rt.Name] += rt.InFlight()
		}
	}
	out := make([]console.Route, 0, len(cfg.Gateway.Routes))
	for _, rc := range cfg.Gateway.Routes {
		r := console.Route{
			Name: rc.Name, Host: rc.Match.Host, PathPrefix: rc.Match.PathPrefix,
			Methods: rc.Match.Methods, FencedMethods: rc.FencedMethods, FenceReads: rc.FenceReads,
			Resource: rc.Resource, Precondition: rc.Precondition,
			Forwarded: counts[rc.Name].Forwarded, Refused: counts[rc.Name].Refused,
			InFlight: inflight[rc.Name],
			Health: console.UpstreamHealth{
				Responses: latency[rc.Name].Count, Unavailable: counts[rc.Name].UpstreamUnavailable,
				Timeouts: counts[rc.Name].UpstreamTimeouts, MeanSeconds: latency[rc.Name].Mean, P95Seconds: latency[rc.Name].P95,
			},
		}
		// The default (no fenced_methods) fences every method but the
		// reads: say so rather than show an empty list.
		if len(r.FencedMethods) == 0 {
			r.FencedMethods = []string{"*"}
			if !rc.FenceReads {
				r.UnfencedMethods = fencegate.ReadMethods()
			}
		}
		if rc.Upstream != nil {
			r.UpstreamKind, r.Upstream = "http", config.RedactURL(rc.Upstream.URL)
		} else if s := rc.ObjectStore(); s != nil {
			r.UpstreamKind, r.Upstream = s.Kind(), config.RedactURL(s.StoreEndpoint())
		}
		out = append(out, r)
	}
	return out
}

type consoleStatus struct {
	s          *Server
	configFile string
}

func (cs consoleStatus) Status(ctx context.Context) console.Status {
	s := cs.s
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	st := console.Status{
		Build:       s.tel.Build,
		Started:     s.consoleState.started,
		Ready:       true,
		FenceMode:   cfg.Fence.Mode,
		ConfigFile:  cs.configFile,
		Routes:      len(routeNames(cfg)),
		Coordinator: s.coord != nil,
		Listeners:   map[string]string{},
	}
	switch {
	case cfg.Store.Embedded != nil:
		st.Store = "embedded " + cfg.Store.Embedded.Path
	case cfg.Store.Postgres != nil:
		st.Store = "postgres " + pgLocation(cfg.Store.Postgres.URL)
	case cfg.Store.Etcd != nil:
		st.Store = "etcd " + cfg.Store.Etcd.Prefix
	}
	if s.pinger != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := s.pinger.Ping(ctx); err != nil {
			st.Ready, st.NotReady = false, "store unavailable: "+err.Error()
		}
	}
	st.Recovering = s.recovering()
	for _, l := range s.listeners {
		st.Listeners[l.name] = l.ln.Addr().String()
	}
	s.consoleState.mu.Lock()
	st.LastReload = s.consoleState.reload
	s.consoleState.mu.Unlock()
	return st
}

// pgLocation is host/database of a PostgreSQL URL or key=value string,
// never its password.
func pgLocation(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Host + u.Path
	}
	var host, db string
	for _, kv := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "host":
			host = v
		case "dbname":
			db = v
		}
	}
	return host + "/" + db
}

// consoleSessions binds the admin listener's browser sessions to its
// current keys (a reload that removes a key ends its sessions).
type consoleSessions struct{ s *Server }

func (cs consoleSessions) Start(key string) (*http.Cookie, error) {
	c, _, err := cs.s.sessions.Start(cs.s.edges.apiAuth["admin"].Load(), key)
	return c, err
}

func (cs consoleSessions) End(r *http.Request) *http.Cookie { return cs.s.sessions.End(r) }
