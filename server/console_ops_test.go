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

// TestConsoleLogin: a browser with no key is sent to the login form; a
// wrong key is refused there; the operator's key starts a session whose
// cookie is HttpOnly, Secure, SameSite=Strict and expires; the session
// reads pages and JSON but cannot write (the fence API still wants the
// bearer key); a form posted from another origin is refused; logging out
// ends the session on the server too.
func TestConsoleLogin(t *testing.T) {
	e := startConsole(t)
	ctx := browser(t, map[string]any{})
	open := func(path string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(e.admin+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
	}
	location := func() string {
		t.Helper()
		u, err := url.Parse(eval[string](t, ctx, `location.href`))
		if err != nil {
			t.Fatal(err)
		}
		return u.RequestURI()
	}
	submit := func(key string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#key"), key)); err != nil {
			t.Fatal(err)
		}
		if err := clickAndLoad(ctx, `#login button[type=submit]`); err != nil {
			t.Fatal(err)
		}
	}

	open("/refusals")
	if got := location(); got != "/login?next=%2Frefusals" {
		t.Fatalf("without a key the console is at %q; want the login form", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#login input[type=password]").length`); n != 1 {
		t.Fatalf("login page has %d password fields", n)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#insecure").length`); n != 0 {
		t.Error("login on 127.0.0.1 warns of plain HTTP; browsers keep Secure cookies for loopback")
	}
	shoot(t, ctx, "login.png")

	submit("not-the-key")
	if got := eval[string](t, ctx, `(document.querySelector("#login-error") || document.body).textContent`); !strings.Contains(got, "unknown or revoked API key") {
		t.Errorf("wrong key: the page at %s says %q", location(), got)
	}
	if got := location(); got != "/login" {
		t.Errorf("after a wrong key the browser is at %q; want the login form", got)
	}

	// The next parameter of the form survived the wrong key.
	open("/login?next=%2Frefusals")
	submit(consoleKey)
	if got := location(); got != "/refusals" {
		t.Errorf("after logging in the browser is at %q; want /refusals", got)
	}
	if got := text(t, ctx, "#user"); got != "ops" {
		t.Errorf("header shows user %q; want ops", got)
	}
	if got := texts(t, ctx, "table.refusals td.code"); len(got) != e.refusals {
		t.Errorf("refusals page after login shows %q", got)
	}
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	cookies := res.Cookies
	var session *network.Cookie
	for _, c := range cookies {
		if c.Name == auth.SessionCookie {
			session = c
		}
	}
	if session == nil {
		t.Fatalf("no %s cookie; have %+v", auth.SessionCookie, cookies)
	}
	expires := time.Unix(int64(session.Expires), 0)
	if !session.HTTPOnly || !session.Secure || session.SameSite != network.CookieSameSiteStrict || session.Session ||
		expires.Before(time.Now().Add(7*time.Hour)) || expires.After(time.Now().Add(9*time.Hour)) {
		t.Errorf("session cookie HttpOnly %v Secure %v SameSite %s session-only %v expires %s; want HttpOnly, Secure, Strict, expiring in 8h",
			session.HTTPOnly, session.Secure, session.SameSite, session.Session, expires)
	}
	if strings.Contains(session.Value, consoleKey) {
		t.Error("the cookie carries the key")
	}
	if n := eval[int](t, ctx, `document.cookie.length`); n != 0 {
		t.Error("script can read the session cookie")
	}

	// The session reads JSON, and cannot write: a same-origin fetch with
	// the cookie is refused by the fence API.
	status := evalAwait(t, ctx, `(async () => (await fetch("/v1/status")).status)()`)
	if status != 200 {
		t.Errorf("GET /v1/status with the session: %d; want 200", status)
	}
	write := `(async () => (await fetch("/v1/fences/advance", {method: "POST", headers: {"Content-Type": "application/json"},
		body: JSON.stringify({resource: "/csrf", token: 99, owner: "x"})})).status)()`
	if got := evalAwait(t, ctx, write); got != 401 {
		t.Errorf("POST /v1/fences/advance with only the session cookie: %d; want 401", got)
	}
	var st struct{ Highest int64 }
	e.getJSON(t, "/v1/fences?resource=/csrf", &st)
	if st.Highest != 0 {
		t.Errorf("the session's POST advanced /csrf to %d", st.Highest)
	}

	// Outside the browser: the cookie, cross-origin forms, and logout.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	withCookie := map[string]string{"Cookie": auth.SessionCookie + "=" + session.Value}
	if r := do(t, c, "GET", e.admin+"/v1/status", nil, withCookie); r.Status != 200 {
		t.Errorf("GET with the session cookie: %d", r.Status)
	}
	for _, path := range []string{"/login", "/logout"} {
		h := map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded", "Cookie": withCookie["Cookie"]}
		if r := do(t, c, "POST", e.admin+path, strings.NewReader("key="+consoleKey), h); r.Status != http.StatusForbidden || strings.Contains(r.Header.Get("Set-Cookie"), auth.SessionCookie+"=") && path == "/login" {
			t.Errorf("POST %s from another origin: %d %q; want 403 and no cookie", path, r.Status, r.Header.Get("Set-Cookie"))
		}
	}
	if r := do(t, c, "GET", e.admin+"/login?next=//evil.example/x", nil, nil); !strings.Contains(r.Body, `name="next" value="/"`) {
		t.Errorf("login form keeps an off-site next: %s", r.Body)
	}
	// A JSON client without credentials still gets 401 with the Bearer
	// challenge, not the form.
	if r := do(t, c, "GET", e.admin+"/v1/status", nil, nil); r.Status != 401 || r.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("GET /v1/status without credentials: %d %v", r.Status, r.Header)
	}

	open("/")
	if err := clickAndLoad(ctx, "#logout"); err != nil {
		t.Fatal(err)
	}
	if got := location(); got != "/login" {
		t.Errorf("after logout the browser is at %q; want /login", got)
	}
	open("/fences")
	if got := location(); !strings.HasPrefix(got, "/login?next=") {
		t.Errorf("after logout /fences is at %q; want the login form", got)
	}
	if r := do(t, c, "GET", e.admin+"/v1/status", nil, withCookie); r.Status != 401 {
		t.Errorf("the logged-out cookie still reads: %d", r.Status)
	}
}

const opsYAML = `
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: $UPSTREAM}
      resource: "{path}"
      auth:
        api_keys:
          - {owner: worker-a, sha256: "%[2]s"}
          - {owner: worker-b, sha256: "%[3]s"}
    - name: broken
      match: {path_prefix: /broken/}
      upstream: {url: "http://127.0.0.1:$DEAD"}
      resource: "{path}"
    - name: slow
      match: {path_prefix: /slow/}
      upstream: {url: $UPSTREAM, timeout: 300ms}
      resource: "{path}"
      fenced_methods: [PUT, DELETE]
store:
  embedded: {path: $DIR/fencegate.db}
coordinator:
  enabled: true
  listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
  auth:
    api_keys:
      - {owner: ops, sha256: "%[1]s"}
`

// TestConsoleOperations: what on-call reads first. Routes show the methods
// they fence (the default spelt out), their upstream's 502 and 504 counts
// and latency (also in /metrics); fence and refusal
// rows show the current lease holder; refusals filter by code, route and
// owner.
func TestConsoleOperations(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.HasPrefix(r.URL.Path, "/slow/") {
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(up.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadPort := strings.TrimPrefix(dead.URL, "http://127.0.0.1:")
	dead.Close() // connection refused from now on: 502
	dir := t.TempDir()
	y := fmt.Sprintf(opsYAML, auth.HashKey(consoleKey), auth.HashKey("ka"), auth.HashKey("kb"))
	y = strings.ReplaceAll(y, "$DEAD", deadPort)
	logs := &testenv.LogBuffer{}
	s, err := server.New(context.Background(), parse(t, y, up.URL, dir), server.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
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
	admin, gw, coord := "http://"+s.Addr("admin"), "http://"+s.Addr("gateway"), "http://"+s.Addr("coordinator")
	c := &http.Client{}
	ops := map[string]string{"Authorization": "Bearer " + consoleKey, "Content-Type": "application/json"}

	// worker-b holds /orders/1's lease and writes with it; worker-a, late,
	// is refused stale and then forgets its token.
	acquireOn := func(res, owner string) int64 { return acquireLease(t, coord, res, owner) }
	acquire := func(owner string) int64 { return acquireOn("/orders/1", owner) }
	old := acquire("worker-a")
	if r := do(t, c, "POST", coord+"/v1/leases/release", strings.NewReader(fmt.Sprintf(`{"resource":"/orders/1","owner":"worker-a","token":%d}`, old)),
		map[string]string{"Content-Type": "application/json"}); r.Status != 200 && r.Status != 204 {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	lease := struct{ Token int64 }{acquire("worker-b")}
	put := func(path, key string, token int64) answer {
		h := map[string]string{}
		if key != "" {
			h["Authorization"] = "Bearer " + key
		}
		if token > 0 {
			h["Fencing-Token"] = fmt.Sprint(token)
		}
		return do(t, c, "PUT", gw+path, strings.NewReader("x"), h)
	}
	for _, w := range []struct {
		path, key string
		token     int64
		want      int
	}{
		{"/orders/1", "kb", lease.Token, 204},
		{"/orders/1", "ka", old, 409},
		{"/orders/2", "ka", 0, 428},
		{"/broken/1", "", acquireOn("/broken/1", "worker-c"), 502},
		{"/slow/1", "", acquireOn("/slow/1", "worker-c"), 504},
	} {
		if r := put(w.path, w.key, w.token); r.Status != w.want {
			t.Fatalf("PUT %s: %d %s; want %d", w.path, r.Status, r.Body, w.want)
		}
	}
	// The refusals' log lines name what is known and leave out the rest
	// (no "owner":"" for a route without credentials, no "highest":0).
	lines := map[string]map[string]any{}
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["component"] == "gateway" {
			if msg, _ := m["msg"].(string); strings.Contains(msg, "_") {
				lines[msg] = m
			}
		}
	}
	for _, want := range []struct {
		code            string
		present, absent []string
	}{
		{"stale_fencing_token", []string{"owner", "token", "highest", "resource"}, nil},
		{"missing_fencing_token", []string{"owner"}, []string{"token", "highest"}},
		{"upstream_unavailable", []string{"resource", "token"}, []string{"owner", "highest"}},
	} {
		m, ok := lines[want.code]
		if !ok {
			t.Errorf("no %s log line in\n%s", want.code, logs.String())
			continue
		}
		for _, k := range want.present {
			if v, ok := m[k]; !ok || v == "" || v == 0.0 {
				t.Errorf("%s log line: %s = %v; want it set (%v)", want.code, k, v, m)
			}
		}
		for _, k := range want.absent {
			if v, ok := m[k]; ok {
				t.Errorf("%s log line has %s = %v; unknown, so it must be left out (%v)", want.code, k, v, m)
			}
		}
	}
	if m := lines["stale_fencing_token"]; m != nil && m["owner"] != "worker-a" {
		t.Errorf("stale log line owner %v; want worker-a, the refused sender", m["owner"])
	}

	ctx := browser(t, map[string]any{"Authorization": "Bearer " + consoleKey})
	nav := func(path string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(admin+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
	}

	nav("/routes")
	cell := func(route, class string) string {
		return eval[string](t, ctx, fmt.Sprintf(`(() => { for (const tr of document.querySelectorAll("#routes tbody tr"))
			if (tr.querySelector("td.name").textContent.trim() === %q) return tr.querySelector("td.%s").textContent.trim(); return "missing"; })()`, route, class))
	}
	for _, want := range []struct{ route, class, text string }{
		{"orders", "fenced", "all but GET HEAD OPTIONS TRACE (default)"},
		{"slow", "fenced", "PUT DELETE"},
		{"broken", "up502", "1"}, {"broken", "up504", "0"},
		{"slow", "up504", "1"}, {"slow", "up502", "0"},
		{"orders", "up502", "0"}, {"orders", "up504", "0"},
	} {
		if got := cell(want.route, want.class); got != want.text {
			t.Errorf("route %s %s: %q; want %q", want.route, want.class, got, want.text)
		}
	}
	if got := cell("orders", "latency"); !strings.HasSuffix(got, " ms") || !strings.Contains(got, " / ") {
		t.Errorf("orders latency %q; want mean / p95 in ms", got)
	}
	if got := cell("broken", "latency"); got != "—" {
		t.Errorf("broken latency %q; want — (no answer yet)", got)
	}
	shoot(t, ctx, "routes-health.png")

	var routes struct{ Routes []console.Route }
	getJSON(t, admin+"/v1/routes", &routes)
	for _, r := range routes.Routes {
		switch r.Name {
		case "orders":
			if !slices.Equal(r.FencedMethods, []string{"*"}) || !slices.Equal(r.UnfencedMethods, []string{"GET", "HEAD", "OPTIONS", "TRACE"}) {
				t.Errorf("orders: fenced %v unfenced %v; want [*] but the reads", r.FencedMethods, r.UnfencedMethods)
			}
			if r.Health.Responses != 1 || r.Health.MeanSeconds <= 0 || r.Health.P95Seconds < r.Health.MeanSeconds/2 {
				t.Errorf("orders upstream health %+v; want one response with its latency", r.Health)
			}
		case "broken":
			if r.Health.Unavailable != 1 || r.Health.Responses != 0 {
				t.Errorf("broken upstream health %+v; want one 502", r.Health)
			}
		}
	}
	metrics := do(t, c, "GET", admin+"/metrics", nil, ops).Body
	for _, want := range []string{
		`fencegate_requests_total{decision="upstream_unavailable",route="broken"} 1`,
		`fencegate_requests_total{decision="upstream_timeout",route="slow"} 1`,
		`fencegate_upstream_duration_seconds_count{outcome="response",route="orders"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	nav("/fences?prefix=/orders/")
	row := func(res, class string) string {
		return eval[string](t, ctx, fmt.Sprintf(`(() => { for (const tr of document.querySelectorAll("#fences tbody tr"))
			if (tr.querySelector("td.resource").textContent.trim() === %q) return tr.querySelector("td.%s").textContent.trim(); return "missing"; })()`, res, class))
	}
	if got := row("/orders/1", "drained"); got != "yes" {
		t.Errorf("/orders/1 written: drained %q; want yes", got)
	}
	if got := row("/orders/1", "holder"); got != "worker-b" {
		t.Errorf("/orders/1 lease holder %q; want worker-b", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#fences .bad").length`); n != 0 {
		t.Errorf("%d cells in red with nothing in flight", n)
	}
	shoot(t, ctx, "fences-holder.png")

	// Refusals: every one shown, then filtered.
	nav("/refusals")
	allCodes := texts(t, ctx, "table.refusals td.code")
	for _, want := range []string{"stale_fencing_token", "missing_fencing_token"} {
		if !slices.Contains(allCodes, want) {
			t.Errorf("refusals %q lack %s", allCodes, want)
		}
	}
	stale := `(() => { for (const tr of document.querySelectorAll("table.refusals tbody tr"))
		if (tr.querySelector("td.code").textContent.trim() === "stale_fencing_token") return [tr.querySelector("td.owner").textContent.trim(), tr.querySelector("td.holder").textContent.trim()]; return []; })()`
	if got := eval[[]string](t, ctx, stale); !slices.Equal(got, []string{"worker-a", "worker-b"}) {
		t.Errorf("stale refusal owner, holder %q; want worker-a (refused), worker-b (holds the lease)", got)
	}
	for _, f := range []struct{ sel, value, col string }{
		{"#code", "stale_fencing_token", "code"},
		{"#route", "orders", "route"},
		{"#owner", "worker-a", "owner"},
	} {
		nav("/refusals")
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(f.sel), f.value)); err != nil {
			t.Fatal(err)
		}
		if err := clickAndLoad(ctx, "#refusal-filter button"); err != nil {
			t.Fatal(err)
		}
		got := eval[[]string](t, ctx, fmt.Sprintf(`Array.from(document.querySelectorAll("table.refusals tbody tr")).map(tr => tr.children[%d].textContent.trim())`,
			map[string]int{"route": 1, "code": 5, "owner": 6}[f.col]))
		var want int
		var page console.RefusalPage
		getJSON(t, admin+"/v1/refusals?"+f.col+"="+url.QueryEscape(f.value), &page)
		for _, r := range page.Refusals {
			if map[string]string{"code": r.Code, "route": r.Route, "owner": r.Owner}[f.col] == f.value {
				want++
			}
		}
		if len(got) == 0 || len(got) != want || len(got) != len(page.Refusals) || slices.ContainsFunc(got, func(v string) bool { return v != f.value }) {
			t.Errorf("filter %s=%s: page rows %q, JSON %d rows (%d matching); want only and all rows with %s", f.col, f.value, got, len(page.Refusals), want, f.value)
		}
		if len(got) >= len(allCodes) {
			t.Errorf("filter %s=%s kept all %d rows", f.col, f.value, len(got))
		}
		if f.col == "owner" {
			shoot(t, ctx, "refusals-filtered.png")
		}
	}
}

// getJSON reads an admin JSON endpoint with the console's key.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	r := do(t, &http.Client{}, "GET", u, nil, map[string]string{"Authorization": "Bearer " + consoleKey})
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", u, r.Status, r.Body)
	}
	if err := json.Unmarshal([]byte(r.Body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", u, err, r.Body)
	}
}

// evalAwait evaluates js, a promise of a number, and waits for it.
func evalAwait(t *testing.T, ctx context.Context, js string) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}
