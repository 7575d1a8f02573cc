package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
)

const consoleKey = "console-ops-key"

// Hostile values: a resource key and an owner an attacker controls.
const (
	evilKey   = `/evil/<script>document.title="pwned"</script>"'&`
	evilOwner = `"><script>document.title='pwned'</script><b x="`
)

const consoleYAML = `
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: $UPSTREAM}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
coordinator:
  enabled: true
  listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
  jaeger_ui: http://jaeger.example:16686
  recent_refusals: 50
  auth:
    api_keys:
      - {owner: ops, sha256: "%s"}
telemetry:
  otlp_endpoint: $COLLECTOR
log:
  access: true
`

// consoleEnv is a running gateway with real fences, leases and refusals.
type consoleEnv struct {
	srv       *server.Server
	admin     string // http://host:port
	logs      *testenv.LogBuffer
	bulk      []string // /bulk/NNN fences, sorted
	refusals  int
	collector *httptest.Server
}

func startConsole(t *testing.T) *consoleEnv {
	t.Helper()
	up := httptest.NewServer(&seen{})
	t.Cleanup(up.Close)
	// A collector that takes the spans, so that refusals have trace ids.
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(col.Close)
	dir := t.TempDir()
	y := fmt.Sprintf(consoleYAML, auth.HashKey(consoleKey))
	y = strings.NewReplacer("$UPSTREAM", up.URL, "$DIR", dir, "$COLLECTOR", col.URL).Replace(y)
	cfg := parse(t, y, up.URL, dir)
	logs := &testenv.LogBuffer{}
	s, err := server.New(context.Background(), cfg, server.Options{
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), ConfigFile: "console.yaml",
	})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	e := &consoleEnv{srv: s, admin: "http://" + s.Addr("admin"), logs: logs, collector: col}
	gw := "http://" + s.Addr("gateway")
	coord := "http://" + s.Addr("coordinator")
	c := &http.Client{}
	bearer := map[string]string{"Authorization": "Bearer " + consoleKey, "Content-Type": "application/json"}

	// A lease, and writes under its token: one forwarded, then refusals.
	a := do(t, c, "POST", coord+"/v1/leases/acquire", strings.NewReader(`{"resource":"/orders/1","owner":"worker-1","ttl":"5m"}`), map[string]string{"Content-Type": "application/json"})
	if a.Status != 200 {
		t.Fatalf("acquire: %d %s", a.Status, a.Body)
	}
	var lease struct{ Token int64 }
	json.Unmarshal([]byte(a.Body), &lease)
	tok := fmt.Sprint(lease.Token)
	if r := do(t, c, "PUT", gw+"/orders/1", strings.NewReader("v1"), map[string]string{"Fencing-Token": tok}); r.Status != 200 {
		t.Fatalf("write: %d %s", r.Status, r.Body)
	}
	for _, adv := range []string{`{"resource":"/orders/1","token":` + fmt.Sprint(lease.Token+10) + `,"owner":"worker-2"}`,
		fmt.Sprintf(`{"resource":%q,"token":7,"owner":%q}`, evilKey, evilOwner)} {
		if r := do(t, c, "POST", e.admin+"/v1/fences/advance", strings.NewReader(adv), bearer); r.Status != 200 {
			t.Fatalf("advance: %d %s", r.Status, r.Body)
		}
	}
	if r := do(t, c, "PUT", gw+"/orders/1", strings.NewReader("late"), map[string]string{"Fencing-Token": tok}); r.Status != 409 {
		t.Fatalf("stale write: %d %s", r.Status, r.Body)
	}
	if r := do(t, c, "PUT", gw+"/orders/2", strings.NewReader("x"), nil); r.Status != 428 {
		t.Fatalf("write without token: %d %s", r.Status, r.Body)
	}
	e.refusals = 2
	for i := range 230 {
		k := fmt.Sprintf("/bulk/%03d", i)
		e.bulk = append(e.bulk, k)
		body := fmt.Sprintf(`{"resource":%q,"token":%d,"owner":"loader"}`, k, 100+i)
		if r := do(t, c, "POST", e.admin+"/v1/fences/advance", strings.NewReader(body), bearer); r.Status != 200 {
			t.Fatalf("advance %s: %d %s", k, r.Status, r.Body)
		}
	}
	return e
}

// getJSON reads an admin JSON endpoint with the console's key.
func (e *consoleEnv) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	r := do(t, &http.Client{}, "GET", e.admin+path, nil, map[string]string{"Authorization": "Bearer " + consoleKey})
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	if err := json.Unmarshal([]byte(r.Body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, r.Body)
	}
}

// TestConsoleJSON: the JSON listings agree with the fences and leases the
// test made, page with a cursor, and every answer carries the CSP.
func TestConsoleJSON(t *testing.T) {
	e := startConsole(t)
	var got []string
	after := ""
	for {
		var p console.FencePage
		e.getJSON(t, "/v1/fences?prefix=/bulk/&limit=64&after="+after, &p)
		for _, f := range p.Fences {
			got = append(got, f.Resource)
			var one struct{ Highest int64 }
			e.getJSON(t, "/v1/fences?resource="+f.Resource, &one)
			if one.Highest != f.Highest || f.Owner != "loader" {
				t.Fatalf("%s listed at %d (%s); the fence API says %d", f.Resource, f.Highest, f.Owner, one.Highest)
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if !slices.Equal(got, e.bulk) {
		t.Fatalf("listing = %d fences; want the %d made", len(got), len(e.bulk))
	}
	var lp console.LeasePage
	e.getJSON(t, "/v1/leases?prefix=/orders/", &lp)
	if len(lp.Leases) != 1 || lp.Leases[0].Owner != "worker-1" || !lp.Leases[0].Held {
		t.Errorf("leases = %+v; want /orders/1 held by worker-1", lp.Leases)
	}
	var rp console.RefusalPage
	e.getJSON(t, "/v1/refusals", &rp)
	if len(rp.Refusals) != e.refusals || rp.Total != uint64(e.refusals) || rp.Kept != 50 || rp.Refusals[1].Highest == 0 {
		t.Errorf("refusals = %+v; want %d, kept 50", rp, e.refusals)
	}
	var st console.Status
	e.getJSON(t, "/v1/status", &st)
	if !st.Ready || st.FenceMode != "local" || !st.Coordinator || st.ConfigFile != "console.yaml" || st.Build.GoVersion == "" {
		t.Errorf("status = %+v", st)
	}
	var rt struct{ Routes []console.Route }
	e.getJSON(t, "/v1/routes", &rt)
	if len(rt.Routes) != 1 || rt.Routes[0].Forwarded != 1 || rt.Routes[0].Refused != 2 || rt.Routes[0].UpstreamKind != "http" {
		t.Errorf("routes = %+v", rt.Routes)
	}
	// Bad parameters are refused; the old ?resource= contract stays.
	bearer := map[string]string{"Authorization": "Bearer " + consoleKey, "Content-Type": "application/json"}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "resource="} {
		if r := do(t, &http.Client{}, "GET", e.admin+"/v1/fences?"+q, nil, bearer); r.Status != 400 {
			t.Errorf("GET /v1/fences?%s = %d; want 400", q, r.Status)
		}
	}
	r := do(t, &http.Client{}, "GET", e.admin+"/fences", nil, bearer)
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	// The console changes nothing.
	for _, p := range []string{"/", "/fences", "/v1/refusals", "/v1/status"} {
		if r := do(t, &http.Client{}, "POST", e.admin+p, strings.NewReader("{}"), bearer); r.Status != http.StatusMethodNotAllowed {
			t.Errorf("POST %s = %d; want 405", p, r.Status)
		}
	}
	// The access log has a line for the stale write.
	if !strings.Contains(e.logs.String(), `"listener":"gateway","method":"PUT","path":"/orders/1","route":"orders","status":409`) ||
		!strings.Contains(e.logs.String(), `"decision":"stale_fencing_token"`) {
		t.Errorf("no access line for the stale write in:\n%s", e.logs.String())
	}
}

// TestConsoleAuth: with admin auth configured, every page and endpoint of
// the console answers 401 without credentials (the stylesheet and the
// login form excepted), and a browser gets the login form.
func TestConsoleAuth(t *testing.T) {
	e := startConsole(t)
	for _, p := range []string{"/", "/routes", "/fences", "/fence?resource=/orders/1", "/leases", "/refusals",
		"/v1/fences", "/v1/leases", "/v1/refusals", "/v1/routes", "/v1/status"} {
		if r := do(t, &http.Client{}, "GET", e.admin+p, nil, nil); r.Status != 401 {
			t.Errorf("GET %s without credentials = %d; want 401", p, r.Status)
		}
		if r := do(t, &http.Client{}, "GET", e.admin+p, nil, map[string]string{"Authorization": "Bearer wrong"}); r.Status != 401 {
			t.Errorf("GET %s with a wrong key = %d; want 401", p, r.Status)
		}
	}
	ctx := browser(t, map[string]any{})
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(e.admin+"/fences"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || !strings.HasSuffix(resp.URL, "/login?next=%2Ffences") {
		t.Errorf("browser without credentials: %d at %s; want the login form", resp.Status, resp.URL)
	}
	body := eval[string](t, ctx, `document.body.textContent`)
	if strings.Contains(body, "/bulk/") || strings.Contains(body, "/orders/1") {
		t.Errorf("browser without credentials sees fences: %q", body)
	}
}

// TestOpsMetrics: build info, reload results and in-flight writes are
// there from the first scrape, and every counter of a known route starts
// at zero.
func TestOpsMetrics(t *testing.T) {
	e := startConsole(t)
	scrape := func() string {
		t.Helper()
		r := do(t, &http.Client{}, "GET", e.admin+"/metrics", nil, map[string]string{"Authorization": "Bearer " + consoleKey})
		if r.Status != 200 {
			t.Fatalf("metrics: %d", r.Status)
		}
		return r.Body
	}
	m := scrape()
	for _, want := range []string{
		`fencegate_build_info{commit="`,
		`fencegate_config_reloads_total{result="failure"} 0`,
		`fencegate_config_reloads_total{result="success"} 0`,
		`fencegate_config_last_reload_successful 1`,
		`fencegate_config_last_reload_success_timestamp_seconds `,
		`fencegate_inflight_writes{route="orders"} 0`,
		`fencegate_requests_total{decision="too_many_writes",route="orders"} 0`,
		`fencegate_requests_total{decision="forwarded",route="orders"} 1`,
		`fencegate_stale_refusals_total{route="orders"} 1`,
		`fencegate_store_errors_total{op="load"} 0`,
		`fencegate_coordinator_renewals_total{outcome="lost"} 0`,
		`fencegate_coordinator_releases_total{released="false"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("first scrape lacks %s", want)
		}
	}
	// A failed reload (the gateway section cannot be removed live), then
	// a good one.
	bad := parse(t, "coordinator: {enabled: true, listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0}\n", "", t.TempDir())
	if err := e.srv.Reload(bad); err == nil {
		t.Fatal("reload without the gateway section succeeded")
	}
	m = scrape()
	for _, want := range []string{`fencegate_config_reloads_total{result="failure"} 1`, `fencegate_config_last_reload_successful 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("after a failed reload, no %s", want)
		}
	}
	var st console.Status
	e.getJSON(t, "/v1/status", &st)
	if st.LastReload.OK || st.LastReload.Error == "" || st.LastReload.Time.IsZero() {
		t.Errorf("status after a failed reload: %+v", st.LastReload)
	}
}

// TestConsoleInFlight: a write held in flight at a slow upstream shows in
// the fences list (JSON and page) and on its fence page as one write in
// flight, beside a fence with none, and as none once it is answered.
func TestConsoleInFlight(t *testing.T) {
	up := &seen{block: make(chan struct{}), arrived: make(chan struct{}, 1)}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	s, _ := startEdge(t, `
gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: orders, match: {path_prefix: /orders/}, upstream: {url: $UPSTREAM}, resource: "{path}"}
store: {embedded: {path: $DIR/fencegate.db}}
admin: {listen: 127.0.0.1:0}
`, upSrv.URL)
	gw, admin := "http://"+s.Addr("gateway"), "http://"+s.Addr("admin")
	c := &http.Client{}
	if r := do(t, c, "POST", admin+"/v1/fences/advance", strings.NewReader(`{"resource":"/orders/idle","token":4}`),
		map[string]string{"Content-Type": "application/json"}); r.Status != 200 {
		t.Fatalf("advance: %d %s", r.Status, r.Body)
	}
	answered := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("PUT", gw+"/orders/slow", strings.NewReader("x"))
		req.Header.Set("Fencing-Token", "3")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("answered %s", resp.Status)
			}
		}
		answered <- err
	}()
	<-up.arrived // the write is at the upstream, which holds it

	inflight := func() map[string]int {
		t.Helper()
		r := do(t, c, "GET", admin+"/v1/fences?prefix=/orders/", nil, nil)
		var p console.FencePage
		if err := json.Unmarshal([]byte(r.Body), &p); err != nil || r.Status != 200 {
			t.Fatalf("GET /v1/fences: %d %s %v", r.Status, r.Body, err)
		}
		if !strings.Contains(r.Body, `"inflight_writes":`) {
			t.Fatalf("no inflight_writes in %s", r.Body)
		}
		m := map[string]int{}
		for _, f := range p.Fences {
			m[f.Resource] = f.InFlight
		}
		return m
	}
	if got := inflight(); got["/orders/slow"] != 1 || got["/orders/idle"] != 0 || len(got) != 2 {
		t.Errorf("in flight while the upstream holds the write: %v; want /orders/slow 1, /orders/idle 0", got)
	}
	page := do(t, c, "GET", admin+"/fences?prefix=/orders/", nil, nil).Body
	rows := strings.Split(page, "<tr>")
	for res, want := range map[string]string{"/orders/slow": "1", "/orders/idle": "0"} {
		found := false
		for _, row := range rows {
			if strings.Contains(row, "<code>"+res+"</code>") {
				found = true
				if !strings.Contains(row, `<td class="num inflight">`+want+`</td>`) {
					t.Errorf("fences page row of %s: %q; want %s in flight", res, row, want)
				}
			}
		}
		if !found {
			t.Errorf("fences page has no row for %s:\n%s", res, page)
		}
	}
	if one := do(t, c, "GET", admin+"/fence?resource=/orders/slow", nil, nil).Body; !strings.Contains(one, `<dd class="inflight">1 write forwarded`) {
		t.Errorf("fence page of /orders/slow does not show 1 write in flight:\n%s", one)
	}

	close(up.block)
	if err := <-answered; err != nil {
		t.Fatalf("held write: %v", err)
	}
	if got := inflight(); got["/orders/slow"] != 0 {
		t.Errorf("in flight after the answer: %v; want 0", got)
	}
}
