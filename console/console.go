// Package console is the operator console of the admin listener: server
// rendered HTML pages (html/template, no JavaScript needed, no CDN) and the
// JSON API behind the CLI's list commands, over small interfaces the
// process implements (fence and lease listings, recent refusals, routes,
// status).
//
// The console only reads: every handler is a GET, and advancing a fence
// stays the explicit POST /v1/fences/advance of the fence API. It is served
// behind the admin listener's authentication like every admin endpoint.
//
// Keys and owners are user input: templates escape every value by context
// (html/template), and a Content-Security-Policy allows only this
// package's own script and stylesheet, so markup that slipped through
// could not run script anyway.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/telemetry"
)

// FenceLister pages through fence records: up to limit records whose
// resource starts with prefix and sorts after after, in the store's order.
type FenceLister interface {
	ListFences(ctx context.Context, prefix, after string, limit int) ([]fencegate.FenceState, error)
}

// FenceReader reads one fence (the gateway's Fence).
type FenceReader interface {
	State(ctx context.Context, resource string) (fencegate.FenceState, error)
}

// InFlightCounter counts the writes this process has admitted to a
// resource and not yet finished forwarding (the gateway's fence, local or
// shared: gateway.LocalFence and postgres.SharedFence implement it). It
// reads memory only: the fences list asks it once per row.
type InFlightCounter interface {
	InFlight(resource string) int
}

// LeaseLister pages through lease records like FenceLister.
type LeaseLister interface {
	ListLeases(ctx context.Context, prefix, after string, limit int) ([]coordinator.Lease, error)
}

// leaseReader is the optional ability of a LeaseLister to read one lease
// (both lease backends have it), for the fence page.
type leaseReader interface {
	Lease(ctx context.Context, resource string) (coordinator.Lease, error)
}

// RefusalLog is the recent-refusals buffer (telemetry.Refusals).
type RefusalLog interface {
	Recent() []telemetry.Refusal // newest first
	Cap() int
	Total() uint64
}

// RouteInfo lists the gateway's routes as they serve now.
type RouteInfo interface {
	Routes() []Route
}

// StatusProvider reports the process's state for the overview.
type StatusProvider interface {
	Status(ctx context.Context) Status
}

// Cluster lists the replicas that share this process's store (fence mode
// shared), each as it last reported itself.
type Cluster interface {
	Replicas(ctx context.Context) ([]Replica, error)
}

// Replica is one gateway replica of a shared deployment.
type Replica struct {
	ID   string `json:"id"`
	Name string `json:"name"` // host name (the pod's name in Kubernetes)
	Self bool   `json:"self"` // the replica serving this page
	// Up: it reported within the last few report intervals.
	Up       bool      `json:"up"`
	Started  time.Time `json:"started"`
	Seen     time.Time `json:"seen"` // its last report
	SeenAgo  string    `json:"seen_ago"`
	InFlight int64     `json:"inflight_writes"`
	// InFlightByRoute counts its writes in flight per route.
	InFlightByRoute map[string]int64    `json:"inflight_by_route,omitempty"`
	Refusals        uint64              `json:"refusals"` // since it started
	Recent          []telemetry.Refusal `json:"recent_refusals"`
}

// SessionManager starts and ends browser sessions (auth.Sessions bound to
// the listener's current keys).
type SessionManager interface {
	// Start returns the session cookie for key, or an error whose message
	// may be shown (it names no key).
	Start(key string) (*http.Cookie, error)
	// End returns the cookie that ends r's session.
	End(r *http.Request) *http.Cookie
}

// Route is one route as the console shows it. Upstream never carries
// credentials.
type Route struct {
	Name       string   `json:"name"`
	Host       string   `json:"host,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	// FencedMethods are the methods the route fences: the configured
	// fenced_methods, or ["*"] (every method) when the route keeps the
	// default, with UnfencedMethods the reads it leaves out.
	FencedMethods   []string       `json:"fenced_methods"`
	UnfencedMethods []string       `json:"unfenced_methods,omitempty"`
	FenceReads      bool           `json:"fence_reads,omitempty"`
	Resource        string         `json:"resource"`
	UpstreamKind    string         `json:"upstream_kind"` // http, s3, gcs or azure
	Upstream        string         `json:"upstream"`
	Precondition    string         `json:"precondition,omitempty"`
	Forwarded       uint64         `json:"forwarded"` // fenced writes forwarded since start
	Refused         uint64         `json:"refused"`   // requests refused since start
	InFlight        int64          `json:"inflight_writes"`
	Health          UpstreamHealth `json:"upstream_health"`
}

// UpstreamHealth is how a route's upstream answered since start: what
// on-call looks at first when writes fail.
type UpstreamHealth struct {
	Responses   uint64  `json:"responses"`    // requests the upstream answered (any status)
	Unavailable uint64  `json:"unavailable"`  // 502 upstream_unavailable: no answer, connection failed
	Timeouts    uint64  `json:"timeouts"`     // 504 upstream_timeout: no answer within upstream.timeout
	MeanSeconds float64 `json:"mean_seconds"` // time to response headers, mean
	P95Seconds  float64 `json:"p95_seconds"`  // and 95th percentile (histogram bucket bound)
}

// Status is the overview.
type Status struct {
	Build    telemetry.BuildInfo `json:"build"`
	Started  time.Time           `json:"started"`
	Uptime   string              `json:"uptime"`
	Ready    bool                `json:"ready"`
	NotReady string              `json:"not_ready,omitempty"` // why, when not ready
	// Recovering says, while the fence holds writes that a crash or a
	// lost database session may have left in flight could overtake,
	// until when, how many resources and why ("" otherwise).
	Recovering  string            `json:"recovering,omitempty"`
	FenceMode   string            `json:"fence_mode"`
	Store       string            `json:"store"` // kind and location, without credentials
	ConfigFile  string            `json:"config_file,omitempty"`
	LastReload  Reload            `json:"last_reload"`
	Routes      int               `json:"routes"`
	Coordinator bool              `json:"coordinator"`
	Refusals    uint64            `json:"refusals"`      // since start
	RefusalCap  int               `json:"refusals_kept"` // the buffer's size
	Listeners   map[string]string `json:"listeners,omitempty"`
}

// Reload is the result of the last configuration reload (zero Time: none).
type Reload struct {
	Time  time.Time `json:"time,omitzero"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// Lease is a lease record in the console's JSON; its fields are those of
// the coordinator's GET /v1/leases?resource=R answer.
type Lease struct {
	Resource  string               `json:"resource"`
	Owner     string               `json:"owner"`
	Token     int64                `json:"token"`
	ExpiresAt time.Time            `json:"expires_at,omitzero"`
	TTL       coordinator.Duration `json:"ttl"`
	Held      bool                 `json:"held"`
}

func leaseOf(l coordinator.Lease) Lease {
	out := Lease{Resource: l.Resource, Owner: l.Owner, Token: l.Token, ExpiresAt: l.ExpiresAt, Held: l.Held()}
	if out.Held {
		out.TTL = coordinator.Duration(l.Remaining.Round(time.Second))
	}
	return out
}

// FenceRow is one fence of a listing: the stored record, and the writes
// to it this gateway process has in flight now (a shared fence's other
// replicas count their own).
type FenceRow struct {
	fencegate.FenceState
	InFlight int `json:"inflight_writes"`
	// Holder is the owner of the resource's lease when one is held now
	// (the coordinator on the same store), which may differ from Owner,
	// the last writer.
	Holder string `json:"holder,omitempty"`
}

// RefusalRow is a recorded refusal and who holds the resource's lease now.
type RefusalRow struct {
	telemetry.Refusal
	Holder string `json:"holder,omitempty"`
}

// FencePage is the JSON answer of GET /v1/fences?prefix=&after=&limit=.
// Next, when set, is the after of the next page; empty on the last page.
type FencePage struct {
	Fences []FenceRow `json:"fences"`
	Next   string     `json:"next,omitempty"`
}

// LeasePage is the JSON answer of GET /v1/leases?prefix=&after=&limit=.
type LeasePage struct {
	Leases []Lease `json:"leases"`
	Next   string  `json:"next,omitempty"`
}

// RefusalPage is the JSON answer of GET /v1/refusals.
type RefusalPage struct {
	Refusals []RefusalRow `json:"refusals"`
	Kept     int          `json:"kept"`  // the buffer's size
	Total    uint64       `json:"total"` // refusals since start
}

// Paging limits: one page never holds more than MaxLimit records.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Console serves the pages and the JSON API. Nil fields switch their part
// off (the page says so; the JSON endpoint answers 404).
type Console struct {
	// Sessions, if set, lets a browser log in with an API key: GET and
	// POST /login, POST /logout. The listener's auth must accept the
	// session cookie on GET (auth.SessionMiddleware).
	Sessions SessionManager
	Fences   FenceLister     // nil: no gateway, no fences page
	Fence    FenceReader     // the fence page's record; nil: no fence page
	InFlight InFlightCounter // nil: no writes in flight shown (0)
	Leases   LeaseLister     // nil: the coordinator does not share this store
	Cluster  Cluster         // nil: one replica (no cluster page)
	Refusals RefusalLog      // nil: nothing recorded
	Routes   RouteInfo       // nil: no routes
	Status   StatusProvider  // required
	// JaegerUI, if set, links each refusal's trace id to
	// JaegerUI/trace/<id>.
	JaegerUI string
	Log      *slog.Logger // nil: slog.Default()

	pages   map[string]*template.Template
	limiter loginLimiter // failed logins
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var funcs = template.FuncMap{
	"fmtTime": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"join": strings.Join,
	"dur":  func(d coordinator.Duration) string { return time.Duration(d).String() },
	"ms": func(sec float64) string {
		if sec < 0.01 {
			return strconv.FormatFloat(sec*1000, 'f', 1, 64) + " ms"
		}
		return strconv.FormatFloat(sec*1000, 'f', 0, 64) + " ms"
	},
	"short": func(id string) string {
		if len(id) > 16 {
			return id[:16] + "…"
		}
		return id
	},
	"traceURL": func(base, id string) string {
		return strings.TrimRight(base, "/") + "/trace/" + url.PathEscape(id)
	},
}

var pageNames = []string{"overview", "routes", "fences", "fence", "leases", "refusals", "login", "cluster"}

// Register adds the pages and the JSON endpoints (except GET /v1/fences,
// which the fence API serves: see FenceList) to mux.
func (c *Console) Register(mux *http.ServeMux) error {
	if c.limiter.now == nil {
		c.limiter.now = time.Now
	}
	c.pages = make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return err
		}
		c.pages[name] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return err
	}
	h := func(pattern string, f http.HandlerFunc) { mux.Handle(pattern, secure(f)) }
	mux.Handle("GET /console/static/", secure(http.StripPrefix("/console/static/", http.FileServerFS(static))))
	h("GET /{$}", c.overview)
	h("GET /routes", c.routesPage)
	h("GET /fences", c.fencesPage)
	h("GET /fence", c.fencePage)
	h("GET /leases", c.leasesPage)
	h("GET /refusals", c.refusalsPage)
	if c.Sessions != nil {
		h("GET /login", c.loginPage)
		h("POST /login", c.login)
		h("POST /logout", c.logout)
	}
	h("GET /v1/leases", c.leasesJSON)
	h("GET /v1/refusals", c.refusalsJSON)
	h("GET /v1/routes", c.routesJSON)
	h("GET /v1/status", c.statusJSON)
	if c.Cluster != nil {
		h("GET /cluster", c.clusterPage)
		h("GET /v1/cluster", c.clusterJSON)
	}
	return nil
}

// FenceList is the handler of GET /v1/fences without ?resource= (the fence
// API keeps answering ?resource=R with one record).
func (c *Console) FenceList() http.Handler { return secure(http.HandlerFunc(c.fencesJSON)) }

// csp allows this package's own script and stylesheet and nothing else:
// no inline script or style, no other origin, no framing, no plugins.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: under no-referrer browsers send
		// "Origin: null" with the login form's post, which the admin
		// listener must refuse as cross-site. Links to other origins (the
		// Jaeger UI) still carry no admin URL.
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// query is a listing's parameters.
type query struct {
	Prefix, After string
	Limit         int
}

func parseQuery(r *http.Request) (query, *fencegate.Error) {
	v := r.URL.Query()
	q := query{Prefix: v.Get("prefix"), After: v.Get("after"), Limit: DefaultLimit}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return q, fencegate.Errorf(fencegate.CodeInvalidRequest,
				"limit must be an integer from 1 to %d", MaxLimit)
		}
		q.Limit = n
	}
	return q, nil
}

// listing is one of the console's paginated lists (fences, leases): one
// code path serves its JSON endpoint and its page.
type listing[T any] struct {
	// fetch reads one page of rows; nil: this process has no such list
	// (the JSON endpoint answers 404 with off, the page 404).
	fetch func(ctx context.Context, q query) ([]T, error)
	off   string
	op    string                          // for the log: "list fences"
	key   func(T) string                  // a row's cursor
	json  func(rows []T, next string) any // the JSON answer
	page  string                          // the page's template
	title string                          // and title
}

func (c *Console) fenceListing() listing[FenceRow] {
	l := listing[FenceRow]{off: "this process keeps no fences", op: "list fences", page: "fences", title: "Fences",
		key:  func(f FenceRow) string { return f.Resource },
		json: func(rows []FenceRow, next string) any { return FencePage{Fences: rows, Next: next} },
	}
	if c.Fences != nil {
		l.fetch = func(ctx context.Context, q query) ([]FenceRow, error) {
			states, err := c.Fences.ListFences(ctx, q.Prefix, q.After, q.Limit)
			rows := make([]FenceRow, len(states))
			for i, st := range states {
				rows[i] = FenceRow{FenceState: st, InFlight: c.inFlight(st.Resource), Holder: c.holder(ctx, st.Resource)}
			}
			return rows, err
		}
	}
	return l
}

func (c *Console) leaseListing() listing[Lease] {
	l := listing[Lease]{off: "the coordinator does not run on this process's store", op: "list leases", page: "leases", title: "Leases",
		key:  func(l Lease) string { return l.Resource },
		json: func(rows []Lease, next string) any { return LeasePage{Leases: rows, Next: next} },
	}
	if c.Leases != nil {
		l.fetch = func(ctx context.Context, q query) ([]Lease, error) {
			ls, err := c.Leases.ListLeases(ctx, q.Prefix, q.After, q.Limit)
			rows := make([]Lease, len(ls))
			for i, x := range ls {
				rows[i] = leaseOf(x)
			}
			return rows, err
		}
	}
	return l
}

// list reads the page q asks for and the cursor after it: the last key
// when the page is full.
func (l listing[T]) list(ctx context.Context, q query) ([]T, string, error) {
	rows, err := l.fetch(ctx, q)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > 0 && len(rows) >= q.Limit {
		next = l.key(rows[len(rows)-1])
	}
	return rows, next, nil
}

// serveJSON answers the listing's JSON endpoint.
func serveJSON[T any](c *Console, l listing[T], w http.ResponseWriter, r *http.Request) {
	if l.fetch == nil {
		notFound(w, l.off)
		return
	}
	q, e := parseQuery(r)
	if e != nil {
		httprefusal.WriteJSON(w, e)
		return
	}
	rows, next, err := l.list(r.Context(), q)
	if err != nil {
		c.storeError(w, r, l.op, err)
		return
	}
	writeJSON(w, l.json(rows, next))
}

// servePage renders the listing's page.
func servePage[T any](c *Console, l listing[T], w http.ResponseWriter, r *http.Request) {
	if l.fetch == nil {
		http.NotFound(w, r)
		return
	}
	q, e := parseQuery(r)
	if e != nil {
		http.Error(w, e.Message, httprefusal.Status(e))
		return
	}
	rows, next, err := l.list(r.Context(), q)
	if err != nil {
		c.logger().Warn("console_store_error", "op", l.op, "err", err.Error())
		http.Error(w, "the store cannot be read now", http.StatusServiceUnavailable)
		return
	}
	c.render(w, r, l.page, l.title, http.StatusOK, page{Data: listView{query: q, Items: rows, Next: next}})
}

func (c *Console) inFlight(resource string) int {
	if c.InFlight == nil {
		return 0
	}
	return c.InFlight.InFlight(resource)
}

// holder is the owner of resource's lease if one is held now.
func (c *Console) holder(ctx context.Context, resource string) string {
	lr, ok := c.Leases.(leaseReader)
	if !ok || resource == "" {
		return ""
	}
	l, err := lr.Lease(ctx, resource)
	if err != nil || !l.Held() {
		return ""
	}
	return l.Owner
}

// refusalFilter is what the refusals page and GET /v1/refusals keep:
// rows whose code, route and owner equal the query's (empty: any).
type refusalFilter struct{ Code, Route, Owner string }

func (f refusalFilter) keep(r telemetry.Refusal) bool {
	return (f.Code == "" || r.Code == f.Code) && (f.Route == "" || r.Route == f.Route) && (f.Owner == "" || r.Owner == f.Owner)
}

// recent returns the recorded refusals f keeps, newest first, with the
// current holder of each resource's lease (looked up once per resource).
func (c *Console) recent(ctx context.Context, f refusalFilter) []RefusalRow {
	if c.Refusals == nil {
		return nil
	}
	holders := map[string]string{}
	var out []RefusalRow
	for _, r := range c.Refusals.Recent() {
		if !f.keep(r) {
			continue
		}
		h, ok := holders[r.Resource]
		if !ok {
			h = c.holder(ctx, r.Resource)
			holders[r.Resource] = h
		}
		out = append(out, RefusalRow{Refusal: r, Holder: h})
	}
	return out
}

func (c *Console) refusalCap() int {
	if c.Refusals == nil {
		return 0
	}
	return c.Refusals.Cap()
}

func (c *Console) status(ctx context.Context) Status {
	st := c.Status.Status(ctx)
	if !st.Started.IsZero() {
		st.Uptime = time.Since(st.Started).Round(time.Second).String()
	}
	if c.Refusals != nil {
		st.Refusals, st.RefusalCap = c.Refusals.Total(), c.Refusals.Cap()
	}
	return st
}

func (c *Console) routes() []Route {
	if c.Routes == nil {
		return []Route{}
	}
	rs := c.Routes.Routes()
	if rs == nil {
		rs = []Route{}
	}
	return rs
}

// JSON endpoints.

func (c *Console) fencesJSON(w http.ResponseWriter, r *http.Request) {
	serveJSON(c, c.fenceListing(), w, r)
}

func (c *Console) leasesJSON(w http.ResponseWriter, r *http.Request) {
	serveJSON(c, c.leaseListing(), w, r)
}

func filterOf(r *http.Request) refusalFilter {
	q := r.URL.Query()
	return refusalFilter{Code: q.Get("code"), Route: q.Get("route"), Owner: q.Get("owner")}
}

func (c *Console) refusalsJSON(w http.ResponseWriter, r *http.Request) {
	p := RefusalPage{Refusals: c.recent(r.Context(), filterOf(r)), Kept: c.refusalCap()}
	if p.Refusals == nil {
		p.Refusals = []RefusalRow{}
	}
	if c.Refusals != nil {
		p.Total = c.Refusals.Total()
	}
	writeJSON(w, p)
}

func (c *Console) routesJSON(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, struct {
		Routes []Route `json:"routes"`
	}{c.routes()})
}

func (c *Console) statusJSON(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, c.status(r.Context()))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding failed", http.StatusInternalServerError)
		return
	}
	w.Write(append(b, '\n'))
}

func notFound(w http.ResponseWriter, why string) {
	httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeNotFound, "%s", why))
}

// storeError answers a failed store read 503 (the store's message stays in
// the log: it may name hosts).
func (c *Console) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.logger().LogAttrs(r.Context(), slog.LevelWarn, "console_store_error", slog.String("op", what), slog.String("err", err.Error()))
	if errors.Is(err, context.Canceled) {
		return
	}
	e := fencegate.Errorf(fencegate.CodeFenceUnavailable, "%s: the store cannot be read now", what)
	e.RetryAfter = time.Second
	httprefusal.WriteJSON(w, e)
}

func (c *Console) logger() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// Pages.

type navItem struct {
	Name, Href string
	Active     bool
}

type page struct {
	Title      string
	Nav        []navItem
	Data       any
	Refusals   []RefusalRow
	RefusalCap int
	Jaeger     string
	// User is the owner of the browser session the page is shown to
	// (the header offers to log out); empty for a bearer key or no auth.
	User string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string, status int, p page) {
	p.Title = title
	p.Jaeger = c.JaegerUI
	if id, ok := auth.IdentityFrom(r.Context()); ok && id.Credential == auth.SessionCookie {
		p.User = id.Owner
	}
	for _, n := range []navItem{{"Overview", "/", false}, {"Routes", "/routes", false}, {"Fences", "/fences", false},
		{"Leases", "/leases", false}, {"Refusals", "/refusals", false}, {"Cluster", "/cluster", false}} {
		if (n.Href == "/fences" && c.Fences == nil) || (n.Href == "/leases" && c.Leases == nil) || (n.Href == "/cluster" && c.Cluster == nil) {
			continue
		}
		n.Active = n.Href == r.URL.Path || (n.Href == "/fences" && r.URL.Path == "/fence")
		if name != "login" {
			p.Nav = append(p.Nav, n)
		}
	}
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.logger().Error("console template", "page", name, "err", err)
		http.Error(w, "console: page failed to render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "overview", "Overview", http.StatusOK, page{Data: c.status(r.Context())})
}

func (c *Console) routesPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "routes", "Routes", http.StatusOK, page{Data: c.routes()})
}

// listView is the data of the fences and leases pages.
type listView struct {
	query
	Items any
	Next  string
}

func (c *Console) fencesPage(w http.ResponseWriter, r *http.Request) {
	servePage(c, c.fenceListing(), w, r)
}

func (c *Console) leasesPage(w http.ResponseWriter, r *http.Request) {
	servePage(c, c.leaseListing(), w, r)
}

type fenceView struct {
	State    fencegate.FenceState
	InFlight int
	Lease    *Lease
}

func (c *Console) fencePage(w http.ResponseWriter, r *http.Request) {
	res := r.URL.Query().Get("resource")
	if c.Fence == nil || res == "" {
		http.Error(w, "query parameter resource is required", http.StatusBadRequest)
		return
	}
	st, err := c.Fence.State(r.Context(), res)
	if err != nil {
		c.logger().Warn("console_store_error", "op", "fence state", "err", err.Error())
		http.Error(w, "the fence cannot be read now", http.StatusServiceUnavailable)
		return
	}
	st.Resource = res
	v := fenceView{State: st, InFlight: c.inFlight(res)}
	if lr, ok := c.Leases.(leaseReader); ok {
		if l, err := lr.Lease(r.Context(), res); err == nil && l.Token != 0 {
			lv := leaseOf(l)
			v.Lease = &lv
		}
	}
	var mine []RefusalRow
	for _, rf := range c.recent(r.Context(), refusalFilter{}) {
		if rf.Resource == res || slices.Contains(strings.Split(rf.Resource, ","), res) {
			mine = append(mine, rf)
		}
	}
	c.render(w, r, "fence", "Fence", http.StatusOK, page{Data: v, Refusals: mine, RefusalCap: c.refusalCap()})
}

// refusalsView is the refusals page's filter form: the query, and the
// codes, routes and owners to choose from.
type refusalsView struct {
	refusalFilter
	Codes, Routes, Owners []string
}

func (c *Console) refusalsPage(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r)
	all := c.recent(r.Context(), refusalFilter{})
	v := refusalsView{refusalFilter: f}
	for _, rf := range all {
		for _, x := range []struct {
			list *[]string
			v    string
		}{{&v.Codes, rf.Code}, {&v.Routes, rf.Route}, {&v.Owners, rf.Owner}} {
			if x.v != "" && !slices.Contains(*x.list, x.v) {
				*x.list = append(*x.list, x.v)
			}
		}
	}
	for _, l := range [][]string{v.Codes, v.Routes, v.Owners} {
		slices.Sort(l)
	}
	rows := all
	if f != (refusalFilter{}) {
		rows = nil
		for _, rf := range all {
			if f.keep(rf.Refusal) {
				rows = append(rows, rf)
			}
		}
	}
	c.render(w, r, "refusals", "Recent refusals", http.StatusOK, page{Data: v, Refusals: rows, RefusalCap: c.refusalCap()})
}

// Login.

// loginView is the login page's data.
type loginView struct {
	Next  string
	Error string
	// Insecure: the page came over plain HTTP to a host that is not
	// loopback, where the browser drops the Secure session cookie.
	Insecure bool
}

// safeNext is where a login sends the browser: a path on this listener,
// never another site. It is checked in the form the browser will follow,
// and answered in exactly that form (the Location header is set as is):
// printable ASCII without a backslash (browsers drop tabs and newlines
// and read "\" as "/", so "/\t/evil" and "/\evil" are "//evil" to them),
// a path-absolute URL with its dot segments and repeated slashes cleaned
// away, so nothing it turns into afterwards can start with "//".
func safeNext(next string) string {
	for i := 0; i < len(next); i++ {
		if c := next[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || !strings.HasPrefix(next, "/") || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" {
		return "/"
	}
	p := u.EscapedPath()
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if !strings.HasPrefix(clean, "/") || strings.HasPrefix(clean, "//") {
		return "/"
	}
	if u.RawQuery != "" {
		clean += "?" + u.RawQuery
	}
	return clean
}

func insecure(r *http.Request) bool {
	if r.TLS != nil {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip == nil || !ip.IsLoopback()
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", "Log in", http.StatusOK, page{Data: loginView{Next: safeNext(r.URL.Query().Get("next")), Insecure: insecure(r)}})
}

// login starts a session for the key the form posts and sends the browser
// on to the page it came for. The admin listener's guard has refused the
// post if another site's page sent it (Origin, Sec-Fetch-Site).
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "unreadable form", http.StatusBadRequest)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	key := r.PostForm.Get("key")
	ids := loginIDs(r, key)
	if d := c.limiter.wait(ids...); d > 0 {
		secs := int((d + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.logger().LogAttrs(r.Context(), slog.LevelWarn, "console_login_limited", slog.String("remote", r.RemoteAddr))
		c.render(w, r, "login", "Log in", http.StatusTooManyRequests, page{Data: loginView{Next: next,
			Error: "too many failed logins: try again in " + strconv.Itoa(secs) + " s", Insecure: insecure(r)}})
		return
	}
	cookie, err := c.Sessions.Start(key)
	if err != nil {
		c.limiter.fail(ids...)
		msg := "unknown or revoked API key"
		var e *fencegate.Error
		if errors.As(err, &e) {
			msg = e.Message
		}
		c.logger().LogAttrs(r.Context(), slog.LevelInfo, "console_login_refused", slog.String("remote", r.RemoteAddr))
		c.render(w, r, "login", "Log in", http.StatusUnauthorized, page{Data: loginView{Next: next, Error: msg, Insecure: insecure(r)}})
		return
	}
	http.SetCookie(w, cookie)
	// Not http.Redirect: it would clean next again, after the check.
	w.Header().Set("Location", next)
	w.WriteHeader(http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, c.Sessions.End(r))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// Cluster view.

// ClusterPage is the JSON answer of GET /v1/cluster: the replicas, and the
// refusals they recently made, newest first, each naming its replica.
type ClusterPage struct {
	Replicas []Replica        `json:"replicas"`
	Refusals []ClusterRefusal `json:"refusals"`
	Up       int              `json:"up"`
}

// ClusterRefusal is a refusal and the replica that made it.
type ClusterRefusal struct {
	telemetry.Refusal
	Replica   string `json:"replica"`
	ReplicaID string `json:"replica_id"`
}

func (c *Console) cluster(ctx context.Context) (ClusterPage, error) {
	rs, err := c.Cluster.Replicas(ctx)
	if err != nil {
		return ClusterPage{}, err
	}
	p := ClusterPage{Replicas: rs, Refusals: []ClusterRefusal{}}
	if p.Replicas == nil {
		p.Replicas = []Replica{}
	}
	for _, r := range rs {
		if r.Up {
			p.Up++
		}
		for _, rf := range r.Recent {
			p.Refusals = append(p.Refusals, ClusterRefusal{Refusal: rf, Replica: r.Name, ReplicaID: r.ID})
		}
	}
	slices.SortStableFunc(p.Refusals, func(a, b ClusterRefusal) int { return b.Time.Compare(a.Time) })
	return p, nil
}

func (c *Console) clusterJSON(w http.ResponseWriter, r *http.Request) {
	p, err := c.cluster(r.Context())
	if err != nil {
		c.storeError(w, r, "list replicas", err)
		return
	}
	writeJSON(w, p)
}

func (c *Console) clusterPage(w http.ResponseWriter, r *http.Request) {
	p, err := c.cluster(r.Context())
	if err != nil {
		c.logger().Warn("console_store_error", "op", "list replicas", "err", err.Error())
		http.Error(w, "the store cannot be read now", http.StatusServiceUnavailable)
		return
	}
	c.render(w, r, "cluster", "Cluster", http.StatusOK, page{Data: p, Jaeger: c.JaegerUI})
}
