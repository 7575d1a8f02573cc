package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/server"
)

// testGateway is a gateway on a real store in front of a recording upstream.
type testGateway struct {
	*httptest.Server
	rec   *recorder.Recorder
	fence *gateway.LocalFence
}

func newTestGateway(t *testing.T, routesYAML string) *testGateway {
	t.Helper()
	rec := &recorder.Recorder{}
	g := newTestGatewayFor(t, routesYAML, rec)
	g.rec = rec
	return g
}

// newTestGatewayFor is a gateway in front of the upstream handler h.
func newTestGatewayFor(t testing.TB, routesYAML string, h http.Handler) *testGateway {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	yaml := "gateway:\n  routes:\n" + strings.ReplaceAll(routesYAML, "UPSTREAM", up.URL)
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	g := gateway.New(f, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	var routes []*gateway.Route
	for _, rc := range cfg.Gateway.Routes {
		up, err := relay.New(server.HTTPUpstreamOptions(rc))
		if err != nil {
			t.Fatal(err)
		}
		rt, err := gateway.NewRoute(server.RouteOptions(rc), up)
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, rt)
	}
	g.SetRoutes(routes)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return &testGateway{Server: srv, fence: f}
}

const ordersRoute = `
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
`

type refusal struct {
	Error    string `json:"error"`
	Message  string `json:"message"`
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Highest  int64  `json:"highest"`
	Route    string `json:"route"`
}

func do(t *testing.T, method, url string, headers map[string][]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range headers {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func tok(v ...string) map[string][]string { return map[string][]string{"Fencing-Token": v} }

func TestBadTokens(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	tests := []struct {
		name    string
		headers map[string][]string
		status  int
		code    string
	}{
		{"missing", nil, 428, "missing_fencing_token"},
		{"empty", tok(""), 400, "invalid_fencing_token"},
		{"signed", tok("-5"), 400, "invalid_fencing_token"},
		{"plus", tok("+5"), 400, "invalid_fencing_token"},
		{"non-decimal", tok("abc"), 400, "invalid_fencing_token"},
		{"spaces", tok("4 2"), 400, "invalid_fencing_token"},
		{"overflow", tok("9223372036854775808"), 400, "invalid_fencing_token"},
		{"repeated", tok("41", "42"), 400, "invalid_fencing_token"},
		{"list", tok("41,42"), 400, "invalid_fencing_token"},
		{"zero", tok("0"), 400, "invalid_fencing_token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(t, "PUT", g.URL+"/orders/7", tt.headers, "x")
			var r refusal
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if status != tt.status || r.Error != tt.code || r.Route != "orders" {
				t.Fatalf("got %d %+v; want %d %s on route orders", status, r, tt.status, tt.code)
			}
		})
	}
	if h := g.rec.History(); len(h) != 0 {
		t.Fatalf("refused requests reached the upstream: %v", h)
	}
}

func TestStaleRefusedAndNotForwarded(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	if st, body := do(t, "PUT", g.URL+"/orders/7", tok("42"), "B"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	st, body := do(t, "PUT", g.URL+"/orders/7", tok("41"), "A")
	var r refusal
	json.Unmarshal([]byte(body), &r)
	want := refusal{Error: "stale_fencing_token", Message: "token 41 is older than 42 already accepted for /orders/7",
		Resource: "/orders/7", Token: 41, Highest: 42, Route: "orders"}
	if st != 409 || r != want {
		t.Fatalf("A's stale write: %d %+v; want 409 %+v", st, r, want)
	}
	if v, _ := g.rec.Get("/orders/7"); v != "B" {
		t.Fatalf("upstream holds %q; want B", v)
	}
	if h := g.rec.HistoryOf("/orders/7"); len(h) != 1 {
		t.Fatalf("upstream applied %d writes; want only B's: %v", len(h), recorder.Summary(h))
	}
}

// TestSpellingsShareOneFence: every spelling of one upstream object maps to
// one fence key, and the upstream receives the canonical path, so the fence
// cannot be bypassed by re-spelling the path (seed test 7).
// putSpelling PUTs "A" to the gateway at base with the request target
// sent exactly as path is spelt, and returns the status and body.
func putSpelling(t *testing.T, base, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", base+"/x", strings.NewReader("A"))
	req.URL.Opaque = path
	req.Header.Set("Fencing-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func TestSpellingsShareOneFence(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	do(t, "PUT", g.URL+"/orders/7", tok("42"), "B")
	for _, p := range []string{"/orders//7", "/orders/./7", "/orders/%37", "/%6frders/7", "/orders/7/"} {
		if st, _ := putSpelling(t, g.URL, p, "41"); st != 409 {
			t.Errorf("%s with token 41: status %d; want 409", p, st)
		}
	}
	for _, p := range []string{"/orders/../orders/7", "/orders/%2e%2e/orders/7", "/orders%2F7", "/orders/7%00"} {
		if st, b := putSpelling(t, g.URL, p, "41"); st != 400 || !strings.Contains(b, "invalid_resource") {
			t.Errorf("%s: %d %s; want 400 invalid_resource", p, st, b)
		}
	}
	if h := g.rec.History(); len(h) != 1 {
		t.Fatalf("upstream applied %s; want only B's write", recorder.Summary(h))
	}
}

// TestEveryWritePath (seed test 7): every fenced method, and every route
// that reaches the same upstream object, applies the check.
func TestEveryWritePath(t *testing.T) {
	g := newTestGateway(t, ordersRoute+`
    - name: orders-by-host
      match: {host: orders.internal}
      upstream: {url: UPSTREAM}
      resource: "{path}"
`)
	do(t, "PUT", g.URL+"/orders/7", tok("42"), "B")
	for _, m := range []string{"PUT", "POST", "PATCH", "DELETE"} {
		if st, _ := do(t, m, g.URL+"/orders/7", tok("41"), "A"); st != 409 {
			t.Errorf("%s with stale token: %d; want 409", m, st)
		}
		if st, _ := do(t, m, g.URL+"/orders/7", nil, "A"); st != 428 {
			t.Errorf("%s without token: %d; want 428", m, st)
		}
	}
	req, _ := http.NewRequest("PUT", g.URL+"/orders/7", strings.NewReader("A"))
	req.Host = "orders.internal"
	req.Header.Set("Fencing-Token", "41")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 409 {
		t.Errorf("second route to the same object with stale token: %d; want 409", resp.StatusCode)
	}
	// Reads pass through unfenced.
	if st, body := do(t, "GET", g.URL+"/orders/7", nil, ""); st != 200 || body != "B" {
		t.Errorf("GET: %d %q; want 200 B", st, body)
	}
	if h := g.rec.History(); len(h) != 1 {
		t.Fatalf("upstream applied %s; want only B's write", recorder.Summary(h))
	}
}

func TestFenceReadsAndMethods(t *testing.T) {
	g := newTestGateway(t, `
    - name: strict
      match: {path_prefix: /strict/, methods: [GET, PUT]}
      upstream: {url: UPSTREAM}
      resource: "{path.2}"
      fence_reads: true
`)
	if st, _ := do(t, "GET", g.URL+"/strict/a", nil, ""); st != 428 {
		t.Fatalf("GET on fence_reads route without token: %d; want 428", st)
	}
	if st, _ := do(t, "POST", g.URL+"/strict/a", tok("1"), ""); st != 404 {
		t.Fatalf("POST not in match.methods: %d; want 404 no_route", st)
	}
	if st, _ := do(t, "PUT", g.URL+"/elsewhere", tok("1"), ""); st != 404 {
		t.Fatalf("unknown path: %d; want 404", st)
	}
}

func TestCaseInsensitiveKeys(t *testing.T) {
	g := newTestGateway(t, `
    - name: ci
      match: {path_prefix: /docs/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      case_insensitive: true
`)
	do(t, "PUT", g.URL+"/docs/Report", tok("42"), "B")
	if st, _ := do(t, "PUT", g.URL+"/docs/REPORT", tok("41"), "A"); st != 409 {
		t.Fatalf("other case with older token: %d; want 409", st)
	}
}

func TestBodyLimit(t *testing.T) {
	g := newTestGateway(t, `
    - name: small
      match: {path_prefix: /s/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      max_body_bytes: 10
`)
	if st, body := do(t, "PUT", g.URL+"/s/a", tok("1"), strings.Repeat("x", 11)); st != 413 || !strings.Contains(body, "body_too_large") {
		t.Fatalf("11 bytes: %d %s; want 413", st, body)
	}
	// A chunked body without Content-Length is cut at the limit too.
	req, _ := http.NewRequest("PUT", g.URL+"/s/b", io.MultiReader(strings.NewReader(strings.Repeat("y", 100))))
	req.ContentLength = -1
	req.Header.Set("Fencing-Token", "1")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Fatalf("chunked 100 bytes: %d; want 413", resp.StatusCode)
		}
	}
	if st, _ := do(t, "PUT", g.URL+"/s/c", tok("1"), "0123456789"); st != 200 {
		t.Fatalf("10 bytes: %d; want 200", st)
	}
	if h := g.rec.History(); len(h) != 1 || h[0].Key != "/s/c" {
		t.Fatalf("upstream applied %s; want only /s/c", recorder.Summary(h))
	}
}

// TestSameTokenConcurrent (seed test 6): concurrent writes with the same
// token are all forwarded; the upstream's own semantics (here: last write
// wins) decide between them. This is documented behaviour: a token fences
// out older owners, it does not serialize one owner's own writes.
func TestSameTokenConcurrent(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = do(t, "PUT", g.URL+"/orders/9", tok("7"), fmt.Sprint(i))
		}()
	}
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Fatalf("write %d: %d; want 200", i, st)
		}
	}
	if h := g.rec.HistoryOf("/orders/9"); len(h) != len(statuses) {
		t.Fatalf("upstream applied %d writes; want %d", len(h), len(statuses))
	}
}

func TestUpstreamDown(t *testing.T) {
	g := newTestGateway(t, `
    - name: down
      match: {path_prefix: /d/}
      upstream: {url: "http://127.0.0.1:1"}
      resource: "{path}"
`)
	st, body := do(t, "PUT", g.URL+"/d/x", tok("1"), "x")
	if st != 502 || !strings.Contains(body, "upstream_unavailable") || strings.Contains(body, "127.0.0.1") {
		t.Fatalf("upstream down: %d %s; want 502 upstream_unavailable without internal address", st, body)
	}
}

// TestAbortIncompleteBody: a write whose body is still arriving when a newer
// token advances is aborted; the newer write does not wait for the slow
// client, and the upstream never applies the incomplete request.
func TestAbortIncompleteBody(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	pr, pw := io.Pipe()
	aDone := make(chan int)
	go func() {
		req, _ := http.NewRequest("PUT", g.URL+"/orders/10", pr)
		req.ContentLength = 1 << 20
		req.Header.Set("Fencing-Token", "41")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			aDone <- 0
			return
		}
		resp.Body.Close()
		aDone <- resp.StatusCode
	}()
	pw.Write([]byte(strings.Repeat("a", 1000)))
	for {
		st, _ := g.fence.State(t.Context(), "/orders/10")
		if st.Highest == 41 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st, body := do(t, "PUT", g.URL+"/orders/10", tok("42"), "B"); st != 200 {
		t.Fatalf("B: %d %s", st, body)
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if st := <-aDone; st == 200 {
		t.Fatal("A's incomplete write answered 200")
	}
	if got := recorder.Summary(g.rec.HistoryOf("/orders/10")); got != "PUT B@42" {
		t.Fatalf("upstream applied %q; want only B's write", got)
	}
}

// refusingUpstream answers every forward with a refusal of its own, as the
// S3 adapter does for a failed precondition.
type refusingUpstream struct{ err error }

func (u refusingUpstream) Forward(http.ResponseWriter, *http.Request, *gateway.Request) error {
	return u.err
}

// serveOrders serves the orders route through up, an upstream of the test's.
func serveOrders(t *testing.T, up gateway.Upstream, log *slog.Logger) *httptest.Server {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte("gateway:\n  routes:\n"+strings.ReplaceAll(ordersRoute, "UPSTREAM", "http://127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gateway.NewRoute(server.RouteOptions(cfg.Gateway.Routes[0]), up)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{}), gateway.Options{Logger: log})
	g.SetRoutes([]*gateway.Route{rt})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv
}

// TestUpstreamRefusal: a *fencegate.Error from an upstream is answered as
// is, and logging it terminates (its cause is never itself).
func TestUpstreamRefusal(t *testing.T) {
	want := fencegate.Errorf(fencegate.CodePreconditionFailed, "the object changed")
	var logs strings.Builder
	srv := serveOrders(t, refusingUpstream{err: want}, slog.New(slog.NewTextHandler(&logs, nil)))
	st, body := do(t, "PUT", srv.URL+"/orders/1", tok("1"), "x")
	if st != 412 || !strings.Contains(body, `"error":"precondition_failed"`) {
		t.Fatalf("got %d %s; want 412 precondition_failed", st, body)
	}
	if want.Err != nil {
		t.Fatalf("the upstream's error got a cause attached: %v", want.Err)
	}
	if !strings.Contains(logs.String(), "precondition_failed") {
		t.Fatalf("no log line: %s", logs.String())
	}
}

// xmlUpstream answers refusals in its own dialect, as the S3 adapter does.
type xmlUpstream struct{ refusingUpstream }

func (xmlUpstream) WriteError(w http.ResponseWriter, r *http.Request, e *fencegate.Error) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(httprefusal.Status(e))
	fmt.Fprintf(w, "<Error><Code>%s</Code></Error>", e.Code)
}

// TestRefusedPathInRouteDialect: a hostile path is refused in the dialect of
// the route its raw form matches, so S3 clients see an S3 error.
func TestRefusedPathInRouteDialect(t *testing.T) {
	srv := serveOrders(t, xmlUpstream{}, slog.New(slog.DiscardHandler))
	req, _ := http.NewRequest("PUT", srv.URL+"/x", strings.NewReader("x"))
	req.URL.Opaque = "/orders/a/../b"
	req.Header.Set("Fencing-Token", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || string(b) != "<Error><Code>invalid_resource</Code></Error>" {
		t.Fatalf("got %d %s; want 400 XML invalid_resource", resp.StatusCode, b)
	}
}

// TestHalfClosedClientNeverSeesSuccess: a client that sends its write and
// shuts down its sending side while the write waits for an older one in
// flight (drain) is gone as far as net/http can tell. The write is not
// forwarded, and the client must never read a 200 for it: net/http would
// answer an implicit 200 if the gateway just returned.
func TestHalfClosedClientNeverSeesSuccess(t *testing.T) {
	rec := &recorder.Recorder{}
	release := make(chan struct{})
	held := make(chan struct{})
	g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Fencing-Token") == "41" {
			close(held)
			<-release
		}
		rec.ServeHTTP(w, r)
	}))
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		do(t, "PUT", g.URL+"/orders/h", tok("41"), "A")
	}()
	<-held
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /orders/h HTTP/1.1\r\nHost: gw\r\nFencing-Token: 42\r\nContent-Length: 1\r\n\r\nB")
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(conn)
	close(release)
	<-aDone
	if strings.HasPrefix(string(answer), "HTTP/1.1 2") {
		t.Fatalf("the half-closed client read a success:\n%s", answer)
	}
	if got := recorder.Summary(rec.HistoryOf("/orders/h")); got != "PUT A@41" {
		t.Fatalf("upstream applied %q; want only A's write", got)
	}
}
