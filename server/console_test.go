package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
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

func chromium(t *testing.T) string {
	t.Helper()
	p, err := testenv.LookBinary("chromium")
	if err != nil {
		if testenv.CI() {
			t.Fatalf("chromium is not installed (CI=true, so this is a failure, not a skip): run scripts/deps.sh")
		}
		t.Skipf("chromium is not installed: run scripts/deps.sh")
	}
	return p
}

// browser starts headless Chromium with a fresh profile that sends the
// admin key on every request.
func browser(t *testing.T, headers map[string]any) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 760),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(headers)}); err != nil {
		t.Fatalf("chromium headers: %v", err)
	}
	return ctx
}

// screenshotDir is where the pages' screenshots go. By default a
// directory of the test's own ($FENCEGATE_TEST_ARTIFACTS/console when that
// is set, so CI can keep them, else t.TempDir()), so a test run leaves the
// work tree alone. FENCEGATE_UPDATE_SCREENSHOTS=1 writes them into
// docs/console, the documentation's images; FENCEGATE_SCREENSHOT_DIR names
// a directory of its own (as before).
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("FENCEGATE_SCREENSHOT_DIR"); d != "" {
		return d
	}
	if os.Getenv("FENCEGATE_UPDATE_SCREENSHOTS") == "1" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, "docs", "console")
	}
	if d := os.Getenv("FENCEGATE_TEST_ARTIFACTS"); d != "" {
		return filepath.Join(d, "console")
	}
	return t.TempDir()
}

func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := screenshotDir(t)
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func texts(t *testing.T, ctx context.Context, sel string) []string {
	t.Helper()
	js := fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.textContent.trim())`, sel)
	return eval[[]string](t, ctx, js)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// TestConsoleBrowser loads every page in headless Chromium against a
// running gateway with real fences, leases and refusals, checks the DOM
// for the values it made, follows the pagination and the link to one
// fence, and saves the screenshots of docs/console.md.
func TestConsoleBrowser(t *testing.T) {
	e := startConsole(t)
	ctx := browser(t, map[string]any{"Authorization": "Bearer " + consoleKey})
	nav := func(path string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(e.admin+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
	}

	nav("/")
	if got := text(t, ctx, "#fence-mode"); got != "local" {
		t.Errorf("fence mode %q; want local", got)
	}
	if got := text(t, ctx, "#ready"); got != "ready" {
		t.Errorf("readiness %q; want ready", got)
	}
	if got := text(t, ctx, "#store"); !strings.HasPrefix(got, "embedded ") {
		t.Errorf("store %q; want embedded …", got)
	}
	shoot(t, ctx, "overview.png")

	nav("/routes")
	if got := texts(t, ctx, "#routes td.name"); !slices.Equal(got, []string{"orders"}) {
		t.Errorf("routes %q; want [orders]", got)
	}
	if f, r := text(t, ctx, "#routes td.forwarded"), text(t, ctx, "#routes td.refused"); f != "1" || r != "2" {
		t.Errorf("forwarded %s, refused %s; want 1, 2", f, r)
	}
	shoot(t, ctx, "routes.png")

	// Pagination: every bulk fence exactly once, in order, over pages.
	nav("/fences?prefix=/bulk/&limit=100")
	var listed []string
	for pages := 1; ; pages++ {
		listed = append(listed, texts(t, ctx, "#fences td.resource")...)
		if eval[int](t, ctx, `document.querySelectorAll("#next").length`) == 0 {
			if pages != 3 {
				t.Errorf("%d pages of 100 for %d fences; want 3", pages, len(e.bulk))
			}
			break
		}
		if err := clickAndLoad(ctx, "#next"); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(listed, e.bulk) {
		t.Fatalf("paged listing has %d fences (first %q); want the %d bulk fences in order", len(listed), listed[:min(3, len(listed))], len(e.bulk))
	}

	nav("/fences?limit=12&after=/bulk/224")
	shoot(t, ctx, "fences.png")
	// Follow the link to one fence.
	if err := clickAndLoad(ctx, `#fences a[href="/fence?resource=%2forders%2f1"]`); err != nil {
		t.Fatalf("follow the link to /orders/1: %v", err)
	}
	if got := text(t, ctx, "#fence .resource"); got != "/orders/1" {
		t.Errorf("fence page of %q; want /orders/1", got)
	}
	if got := text(t, ctx, "#fence .owner"); got != "worker-2" {
		t.Errorf("fence owner %q; want worker-2 (the hand advance)", got)
	}
	if got := text(t, ctx, "#lease"); !strings.Contains(got, "worker-1") {
		t.Errorf("lease %q; want held by worker-1", got)
	}
	if got := texts(t, ctx, "table.refusals td.code"); !slices.Equal(got, []string{"stale_fencing_token"}) {
		t.Errorf("refusals of /orders/1: %q; want [stale_fencing_token]", got)
	}
	shoot(t, ctx, "fence.png")

	nav("/leases")
	if got := texts(t, ctx, "#leases td.owner"); !slices.Equal(got, []string{"worker-1"}) {
		t.Errorf("lease owners %q; want [worker-1]", got)
	}
	shoot(t, ctx, "leases.png")

	nav("/refusals")
	codes := texts(t, ctx, "table.refusals td.code")
	if !slices.Equal(codes, []string{"missing_fencing_token", "stale_fencing_token"}) {
		t.Errorf("refusal codes %q; want newest first [missing_fencing_token stale_fencing_token]", codes)
	}
	hrefs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("a.trace")).map(a => a.href)`)
	if len(hrefs) != 2 || !strings.HasPrefix(hrefs[0], "http://jaeger.example:16686/trace/") {
		t.Errorf("trace links %q; want two links into the Jaeger UI", hrefs)
	}
	shoot(t, ctx, "refusals.png")

	// The hostile key and owner are text, never markup. The fence API
	// stores the canonical form of the key (its quotes and brackets
	// percent-encoded, its & as is); the owner is stored as sent.
	var stored struct{ Resource string }
	e.getJSON(t, "/v1/fences?resource="+url.QueryEscape(evilKey), &stored)
	nav("/fences?prefix=/evil/")
	if got := texts(t, ctx, "#fences td.resource"); !slices.Equal(got, []string{stored.Resource}) {
		t.Errorf("hostile resource shown as %q; want the literal key", got)
	}
	if got := texts(t, ctx, "#fences td.owner"); !slices.Equal(got, []string{evilOwner}) {
		t.Errorf("hostile owner shown as %q; want the literal owner", got)
	}
	title := eval[string](t, ctx, `document.title`)
	scripts := eval[int](t, ctx, `document.querySelectorAll("body script, b[x]").length`)
	if title == "pwned" || scripts != 0 {
		t.Errorf("hostile values became markup: title %q, %d injected elements", title, scripts)
	}
	if err := clickAndLoad(ctx, "#fences td.resource a"); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, "#fence .resource"); got != stored.Resource {
		t.Errorf("fence page of the hostile key shows %q", got)
	}
	if title := eval[string](t, ctx, `document.title`); title == "pwned" {
		t.Error("hostile key ran script on its fence page")
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
// the console answers 401 without credentials, in the browser too.
func TestConsoleAuth(t *testing.T) {
	e := startConsole(t)
	for _, p := range []string{"/", "/routes", "/fences", "/fence?resource=/orders/1", "/leases", "/refusals",
		"/console/static/style.css", "/v1/fences", "/v1/leases", "/v1/refusals", "/v1/routes", "/v1/status"} {
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
	if resp.Status != 401 {
		t.Errorf("browser without credentials: %d; want 401", resp.Status)
	}
	body := eval[string](t, ctx, `document.body.textContent`)
	if strings.Contains(body, "/bulk/") || strings.Contains(body, "/orders/1") {
		t.Errorf("browser without credentials sees fences: %q", body)
	}
}

// clickAndLoad clicks the element sel and waits for the page it loads.
func clickAndLoad(ctx context.Context, sel string) error {
	_, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	return err
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
