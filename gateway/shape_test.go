package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
)

// captured is what an upstream received: method, path, and the headers and
// trailers of each request.
type captured struct {
	Method, Path string
	Header       http.Header
	Trailer      http.Header
}

// captor is an upstream that records every request it receives.
type captor struct {
	mu   sync.Mutex
	reqs []captured
}

func (c *captor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, captured{r.Method, r.URL.Path, r.Header.Clone(), r.Trailer.Clone()})
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (c *captor) take() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reqs
	c.reqs = nil
	return r
}

func refusalOf(t testing.TB, body string) refusal {
	t.Helper()
	var r refusal
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return r
}

// TestMethodSpelling: every spelling of a method is refused or fenced; none
// is forwarded without a token, whichever route the request would match.
func TestMethodSpelling(t *testing.T) {
	up := &captor{}
	g := newTestGatewayFor(t, `
    - name: put-only
      match: {path_prefix: /put/, methods: [PUT]}
      upstream: {url: UPSTREAM}
      resource: "{path}"
    - name: legacy
      match: {path_prefix: /legacy/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      fenced_methods: [PUT, POST, PATCH, DELETE]
    - name: ext
      match: {path_prefix: /ext/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      extension_methods: [FOO]
      fenced_methods: [PUT]
    - name: any
      match: {path_prefix: /}
      upstream: {url: UPSTREAM}
      resource: "{path}"
`, up)
	tests := []struct {
		method, path string
		header       map[string][]string
		status       int
		code         string // "" when forwarded
	}{
		{"put", "/orders/7", nil, 400, "invalid_method"},
		{"Put", "/orders/7", nil, 400, "invalid_method"},
		{"dElEtE", "/orders/7", nil, 400, "invalid_method"},
		{"get", "/orders/7", nil, 400, "invalid_method"},
		{"move", "/orders/7", nil, 400, "invalid_method"},
		// Would fall through to the catch-all if the method were folded
		// for match.methods only.
		{"put", "/put/7", nil, 400, "invalid_method"},
		{"PUT", "/put/7", nil, 428, "missing_fencing_token"},
		// Default: every method but GET, HEAD, OPTIONS, TRACE is fenced.
		{"MOVE", "/orders/7", nil, 428, "missing_fencing_token"},
		{"COPY", "/orders/7", nil, 428, "missing_fencing_token"},
		{"PROPPATCH", "/orders/7", nil, 428, "missing_fencing_token"},
		{"MKCOL", "/orders/7", nil, 428, "missing_fencing_token"},
		{"LOCK", "/orders/7", nil, 428, "missing_fencing_token"},
		{"MERGE", "/orders/7", nil, 428, "missing_fencing_token"},
		{"FOO", "/orders/7", nil, 428, "missing_fencing_token"},
		{"CONNECT", "/orders/7", nil, 428, "missing_fencing_token"},
		{"GET", "/orders/7", nil, 204, ""},
		{"HEAD", "/orders/7", nil, 204, ""},
		{"OPTIONS", "/orders/7", nil, 204, ""},
		{"TRACE", "/orders/7", nil, 204, ""},
		// Overrides are refused on every route and method.
		{"GET", "/orders/7", map[string][]string{"X-HTTP-Method-Override": {"DELETE"}}, 400, "invalid_method"},
		{"POST", "/orders/7", map[string][]string{"X-HTTP-Method": {"DELETE"}, "Fencing-Token": {"1"}}, 400, "invalid_method"},
		{"GET", "/legacy/7", map[string][]string{"X-Method-Override": {"PUT"}}, 400, "invalid_method"},
		// Narrowed: registered methods left out pass, unknown ones stay fenced.
		{"MOVE", "/legacy/7", nil, 204, ""},
		{"FOO", "/legacy/7", nil, 428, "missing_fencing_token"},
		{"PUT", "/legacy/7", nil, 428, "missing_fencing_token"},
		// Declared and left out: passes; undeclared: fenced.
		{"FOO", "/ext/7", nil, 204, ""},
		{"BAR", "/ext/7", nil, 428, "missing_fencing_token"},
		{"foo", "/ext/7", nil, 400, "invalid_method"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			st, body := do(t, tt.method, g.URL+tt.path, tt.header, "")
			got := up.take()
			if st != tt.status {
				t.Fatalf("status %d %s; want %d", st, body, tt.status)
			}
			if tt.code == "" {
				if len(got) != 1 || got[0].Method != tt.method {
					t.Fatalf("upstream got %+v; want one %s", got, tt.method)
				}
				return
			}
			if r := refusalOf(t, body); r.Error != tt.code {
				t.Fatalf("refusal %+v; want %s", r, tt.code)
			}
			if len(got) != 0 {
				t.Fatalf("refused request reached the upstream: %+v", got)
			}
		})
	}
}

const tenantRoute = `
    - name: tenants
      match: {path_prefix: /orders/}
      upstream: {url: UPSTREAM}
      resource: "{header.X-Tenant}:{path}"
`

// TestDecidedHeadersReachUpstream: headers the gateway decided on cannot be
// dropped by Connection, replaced by trailers or aliased with underscores.
func TestDecidedHeadersReachUpstream(t *testing.T) {
	up := &captor{}
	g := newTestGatewayFor(t, tenantRoute, up)
	h := func(kv ...string) map[string][]string {
		m := map[string][]string{"Fencing-Token": {"5"}, "X-Tenant": {"a"}}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = append(m[kv[i]], kv[i+1])
		}
		return m
	}
	tests := []struct {
		name   string
		header map[string][]string
		status int
		code   string
	}{
		{"plain", h(), 204, ""},
		{"close", h("Connection", "close"), 204, ""},
		{"keep-alive", h("Connection", "keep-alive", "Keep-Alive", "timeout=5"), 204, ""},
		{"te", h("Connection", "TE", "Te", "trailers"), 204, ""},
		{"absent custom", h("Connection", "X-Unrelated"), 204, ""},
		{"token", h("Connection", "Fencing-Token"), 400, "invalid_request"},
		{"token lower case", h("Connection", "close, fencing-token"), 400, "invalid_request"},
		{"template header", h("Connection", "X-Tenant"), 400, "invalid_request"},
		{"host", h("Connection", "Host"), 400, "invalid_request"},
		{"authorization", h("Connection", "Authorization"), 400, "invalid_request"},
		{"present custom", h("Connection", "X-Other", "X-Other", "1"), 400, "invalid_request"},
		{"second Connection line", h("Connection", "close", "Connection", "X-Tenant"), 400, "invalid_request"},
		{"underscore alias", h("X_Tenant", "b"), 400, "invalid_request"},
		{"token alias", h("Fencing_Token", "99"), 400, "invalid_request"},
		{"repeated template header", h("X-Tenant", "b"), 400, "invalid_resource"},
		{"comma-joined template header", map[string][]string{"Fencing-Token": {"5"}, "X-Tenant": {"a,b"}}, 400, "invalid_resource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, body := do(t, "PUT", g.URL+"/orders/7", tt.header, "x")
			got := up.take()
			if st != tt.status {
				t.Fatalf("status %d %s; want %d", st, body, tt.status)
			}
			if tt.code != "" {
				if r := refusalOf(t, body); r.Error != tt.code {
					t.Fatalf("refusal %+v; want %s", r, tt.code)
				}
				if len(got) != 0 {
					t.Fatalf("refused request reached the upstream: %+v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Header.Get("X-Tenant") != "a" || got[0].Header.Get("Fencing-Token") != "5" {
				t.Fatalf("upstream got %+v; want X-Tenant a and the token", got)
			}
		})
	}
}

// TestTrailers: a declared trailer naming a decided or present header is
// refused; other trailers never reach the upstream as headers.
func TestTrailers(t *testing.T) {
	up := &captor{}
	g := newTestGatewayFor(t, tenantRoute, up)
	send := func(trailer string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("PUT", g.URL+"/orders/7", io.NopCloser(strings.NewReader("body")))
		req.ContentLength = -1 // chunked, so trailers can follow
		req.Header.Set("Fencing-Token", "5")
		req.Header.Set("X-Tenant", "a")
		req.Trailer = http.Header{trailer: {"b"}}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, name := range []string{"Fencing-Token", "X-Tenant", "Authorization", "Host"} {
		t.Run(name, func(t *testing.T) {
			st, body := send(name)
			if st != 400 || refusalOf(t, body).Error != "invalid_request" {
				t.Fatalf("trailer %s: %d %s; want 400 invalid_request", name, st, body)
			}
			if got := up.take(); len(got) != 0 {
				t.Fatalf("refused request reached the upstream: %+v", got)
			}
		})
	}
	t.Run("unrelated", func(t *testing.T) {
		if st, body := send("X-Checksum"); st != 204 {
			t.Fatalf("%d %s", st, body)
		}
		got := up.take()
		// The proxy announces the trailer but never forwards its value
		// (ReverseProxy clones the trailer map before the body is read).
		if len(got) != 1 || got[0].Header.Get("X-Tenant") != "a" || got[0].Trailer.Get("X-Tenant") != "" {
			t.Fatalf("upstream got %+v", got)
		}
	})
}

// TestCaseInsensitivePrefix: /DOCS/report is the /docs/ route's object, so
// it cannot fall through to the catch-all and its fresh fence.
func TestCaseInsensitivePrefix(t *testing.T) {
	g := newTestGateway(t, `
    - name: docs
      match: {path_prefix: /docs/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      case_insensitive: true
    - name: rest
      match: {path_prefix: /}
      upstream: {url: UPSTREAM}
      resource: "other:{path}"
`)
	if st, body := do(t, "PUT", g.URL+"/docs/report", tok("5"), "new"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	st, body := do(t, "PUT", g.URL+"/DOCS/Report", tok("4"), "stale")
	r := refusalOf(t, body)
	if st != 409 || r.Route != "docs" || r.Resource != "/docs/report" {
		t.Fatalf("stale write through a case variant: %d %+v; want 409 on route docs", st, r)
	}
}

// TestResourceKeyLimit: an over-long key is the client's mistake (400), and
// the refusal echoes only a bounded prefix of it.
func TestResourceKeyLimit(t *testing.T) {
	g := newTestGateway(t, ordersRoute)
	long := "/orders/" + strings.Repeat("k", 40<<10)
	st, body := do(t, "PUT", g.URL+long, tok("1"), "x")
	r := refusalOf(t, body)
	if st != 400 || r.Error != "invalid_resource" {
		t.Fatalf("40 KiB key: %d %.300s; want 400 invalid_resource", st, body)
	}
	if len(body) > 1024 {
		t.Fatalf("refusal is %d bytes; want a bounded echo", len(body))
	}
	ok := "/orders/" + strings.Repeat("k", 1024-len("/orders/"))
	if st, body := do(t, "PUT", g.URL+ok, tok("1"), "x"); st != 200 {
		t.Fatalf("1024-byte key: %d %.300s; want 200", st, body)
	}
	st, body = do(t, "PUT", g.URL+ok+"k", tok("1"), "x")
	if st != 400 || refusalOf(t, body).Error != "invalid_resource" {
		t.Fatalf("1025-byte key: %d %.300s; want 400", st, body)
	}
	// No route: the message quotes the path, bounded.
	st, body = do(t, "PUT", g.URL+"/elsewhere/"+strings.Repeat("z", 8<<10), tok("1"), "x")
	if r := refusalOf(t, body); st != 404 || len(r.Message) > 256+len("…") {
		t.Fatalf("no route: %d message of %d bytes", st, len(r.Message))
	}
}

// TestHostKeyIsCanonical: {host} on a host-pinned route is the configured
// host, so A.example. and a.example are one fence.
func TestHostKeyIsCanonical(t *testing.T) {
	up := &captor{}
	g := newTestGatewayFor(t, `
    - name: pinned
      match: {host: a.example, path_prefix: /}
      upstream: {url: UPSTREAM}
      resource: "{host}{path}"
`, up)
	send := func(host, token string) (int, string) {
		req, _ := http.NewRequest("PUT", g.URL+"/x", strings.NewReader("v"))
		req.Host = host
		req.Header.Set("Fencing-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := send("a.example", "5"); st != 204 {
		t.Fatalf("%d %s", st, body)
	}
	st, body := send("A.EXAMPLE.", "4")
	if r := refusalOf(t, body); st != 409 || r.Resource != "a.example/x" {
		t.Fatalf("stale write through a host variant: %d %+v; want 409 on a.example/x", st, r)
	}
	if st, _ := send("b.example", "1"); st != 404 {
		t.Fatalf("other host: %d; want 404", st)
	}
}

// TestHostTemplateNeedsPinnedHost: callers that build routes without
// config validation get the same refusal.
func TestHostTemplateNeedsPinnedHost(t *testing.T) {
	up, err := relay.New(relay.Options{URL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.NewRoute(gateway.RouteOptions{Name: "r", Resource: "{host}{path}"}, up); err == nil {
		t.Fatal("NewRoute accepted {host} without match.host")
	}
}

// FuzzMethod: no method spelling reaches the upstream without a token
// unless its upper-case form is a read (default route) or a registered
// method the narrowed route leaves out; what is forwarded is what was sent.
func FuzzMethod(f *testing.F) {
	for _, m := range []string{"GET", "put", "Put", "PUT", "dElEtE", "MOVE", "move", "FOO", "PROPFIND", "M-SEARCH", "TRACE", "trace", "GET2"} {
		f.Add(m, false)
		f.Add(m, true)
	}
	up := &captor{}
	g := newTestGatewayFor(f, `
    - name: legacy
      match: {path_prefix: /legacy/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      fenced_methods: [PUT, POST, PATCH, DELETE]
    - name: default
      match: {path_prefix: /}
      upstream: {url: UPSTREAM}
      resource: "{path}"
`, up)
	legacyFenced := map[string]bool{"PUT": true, "POST": true, "PATCH": true, "DELETE": true}
	f.Fuzz(func(t *testing.T, m string, legacy bool) {
		path := "/orders/7"
		if legacy {
			path = "/legacy/7"
		}
		req, err := http.NewRequest(m, g.URL+path, nil)
		if err != nil {
			return // not a method token: Go's server refuses it too
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := up.take()
		if len(got) == 0 {
			return
		}
		if m == "" {
			m = "GET" // the client's default
		}
		if got[0].Method != m {
			t.Fatalf("sent %q, upstream got %q", m, got[0].Method)
		}
		u := strings.ToUpper(m)
		mayPass := fencegate.ReadMethod(u)
		if legacy {
			mayPass = !legacyFenced[u] && fencegate.KnownMethod(u)
		}
		if !mayPass {
			t.Fatalf("%q forwarded without a token on %s (status %d)", m, path, resp.StatusCode)
		}
	})
}

// FuzzHopHeaders: whatever Connection, extra header and trailer a client
// sends, a forwarded write carries the token and the X-Tenant value its
// resource key was built from, exactly once and under no alias.
func FuzzHopHeaders(f *testing.F) {
	seeds := [][3]string{
		{"close", "", ""}, {"Fencing-Token", "", ""}, {"x-tenant", "", ""}, {"keep-alive, X-Foo", "X-Foo", ""},
		{"", "X_Tenant", ""}, {"", "Fencing_token", ""}, {"", "", "X-Tenant"}, {"", "", "Fencing-Token"},
		{"TE", "Te", "X-Sum"}, {" , ,X-TENANT", "", ""}, {"Upgrade, HTTP2-Settings", "Http2-Settings", ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2])
	}
	up := &captor{}
	g := newTestGatewayFor(f, tenantRoute, up)
	f.Fuzz(func(t *testing.T, conn, extra, trailer string) {
		req, err := http.NewRequest("PUT", g.URL+"/orders/7", io.NopCloser(strings.NewReader("x")))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		req.Header.Set("Fencing-Token", "5")
		req.Header.Set("X-Tenant", "a")
		if conn != "" {
			req.Header.Set("Connection", conn)
		}
		if extra != "" {
			req.Header.Add(extra, "b")
		}
		if trailer != "" {
			req.Trailer = http.Header{trailer: {"b"}}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return // the client refused to send it (invalid field name or value)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := up.take()
		if len(got) == 0 {
			return
		}
		h := got[0].Header
		if vs := h.Values("X-Tenant"); len(vs) != 1 || vs[0] != "a" {
			t.Fatalf("Connection %q, extra %q, trailer %q: upstream X-Tenant %q; want [a]", conn, extra, trailer, vs)
		}
		if vs := h.Values("Fencing-Token"); len(vs) != 1 || vs[0] != "5" {
			t.Fatalf("Connection %q, extra %q, trailer %q: upstream token %q; want [5]", conn, extra, trailer, vs)
		}
		for k := range h {
			if fk := strings.ReplaceAll(strings.ToLower(k), "_", "-"); (fk == "x-tenant" || fk == "fencing-token") && k != "X-Tenant" && k != "Fencing-Token" {
				t.Fatalf("alias %s reached the upstream", k)
			}
		}
		for k, vs := range got[0].Trailer {
			if len(vs) > 0 {
				t.Fatalf("trailer %s: %q reached the upstream", k, vs)
			}
		}
	})
}

// A case_insensitive route's upstream folds case, so /docs/Ünterlagen and
// /docs/ünterlagen are one object there. The {path} key must fold the
// letters themselves, not the percent-escaped form the path is carried in
// (where Ü is %C3%9C and ü is %C3%BC, which an ASCII fold never joins):
// otherwise a zombie re-spelling the name in another case gets a fresh
// fence for the same object.
func TestReviewCaseInsensitiveNonASCII(t *testing.T) {
	g := newTestGateway(t, `
    - name: ci
      match: {path_prefix: /docs/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      case_insensitive: true
`)
	if st, body := do(t, "PUT", g.URL+"/docs/%C3%BCnterlagen", tok("42"), "B"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	for _, p := range []string{"/docs/%C3%9Cnterlagen", "/docs/\u00dcnterlagen", "/DOCS/%C3%9CNTERLAGEN"} {
		if st, _ := putSpelling(t, g.URL, p, "41"); st != 409 {
			t.Errorf("%s with token 41 after 42 on /docs/ünterlagen: status %d; want 409", p, st)
		}
	}
	if h := g.rec.History(); len(h) != 1 {
		t.Fatalf("upstream got %d writes; want only B's", len(h))
	}
}

// Rails (Rack::MethodOverride), Laravel and Symfony apply a POST's
// _method parameter (form body; Symfony and Laravel also read the query)
// as the method, like the X-HTTP-Method-Override header checkMethod
// refuses. On a route whose fenced_methods leave POST out, a zombie's
// POST ?_method=DELETE is not fenced and the upstream applies a DELETE,
// which is.
func TestReviewMethodOverrideParameter(t *testing.T) {
	var deleted []string
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		for k, vs := range r.URL.Query() {
			// PHP's reading of parameter names: "." and " " are "_".
			if strings.NewReplacer(".", "_", " ", "_").Replace(k) == "_method" && vs[0] == "DELETE" {
				deleted = append(deleted, r.URL.Path)
			}
		}
	})
	g := newTestGatewayFor(t, `
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      fenced_methods: [PUT, PATCH, DELETE]
`, up)
	if st, body := do(t, "DELETE", g.URL+"/orders/7", tok("42"), ""); st != 200 {
		t.Fatalf("owner's DELETE: %d %s", st, body)
	}
	for _, q := range []string{"_method=DELETE", "x=1&_m%65thod=DELETE", ".method=DELETE"} {
		deleted = nil
		st, _ := do(t, "POST", g.URL+"/orders/7?"+q, tok("41"), "")
		if len(deleted) > 0 || st != http.StatusBadRequest {
			t.Errorf("POST ?%s with token 41 after 42: %d, upstream applied as DELETE: %v; want 400, nothing forwarded", q, st, deleted)
		}
	}
}
