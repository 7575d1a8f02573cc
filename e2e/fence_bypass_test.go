package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Attacks on the request's shape: each one tries to get a write
// past the fence, or applied to another resource than the one fenced,
// against a real fencegate process and a real upstream. The upstream is a
// werkzeug application (Debian's python3-werkzeug) that folds method case,
// honours method overrides and conflates X-Tenant with X_Tenant, the way
// real frameworks do.

// wsgiApplied is one write the werkzeug upstream applied.
type wsgiApplied struct {
	Method string  `json:"method"` // as applied (folded, overridden)
	Sent   string  `json:"sent"`   // REQUEST_METHOD as received
	Path   string  `json:"path"`
	Tenant string  `json:"tenant"`
	Token  *string `json:"token"`
	Body   string  `json:"body"`
}

type wsgiUpstream struct{ URL string }

func startWSGI(t *testing.T) *wsgiUpstream {
	t.Helper()
	return &wsgiUpstream{URL: testenv.WSGIApp(t, "testdata/werkzeug_upstream.py", "/_applied")}
}

// applied returns every write the upstream applied so far.
func (u *wsgiUpstream) applied(t *testing.T) []wsgiApplied {
	t.Helper()
	resp, err := http.Get(u.URL + "/_applied")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a []wsgiApplied
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (u *wsgiUpstream) summary(t *testing.T) string {
	t.Helper()
	var s []string
	for _, a := range u.applied(t) {
		e := a.Method + " " + a.Path
		if a.Tenant != "default" {
			e += " tenant=" + a.Tenant
		}
		if a.Token != nil {
			e += "@" + *a.Token
		}
		s = append(s, e+" "+a.Body)
	}
	return strings.Join(s, ", ")
}

// bypassYAML: an orders route keyed by path, a tenants route keyed by the
// X-Tenant header, a case-insensitive docs route before a catch-all.
func bypassYAML(upstream string) string {
	return ordersGateway(upstream, "10s") + fmt.Sprintf(`    - name: tenants
      match: {path_prefix: /tenants/}
      upstream: {url: %[1]q, timeout: 10s}
      resource: "{header.X-Tenant}:{path}"
    - name: pinned
      match: {host: a.example, path_prefix: /hosted/}
      upstream: {url: %[1]q, timeout: 10s}
      resource: "{host}{path}"
    - name: docs
      match: {path_prefix: /docs/}
      upstream: {url: %[1]q, timeout: 10s}
      resource: "{path}"
      case_insensitive: true
    - name: rest
      match: {path_prefix: /}
      upstream: {url: %[1]q, timeout: 10s}
      resource: "rest:{path}"
store:
  embedded: {path: $DIR/fencegate.db}
admin: {listen: $ADMIN}
`, upstream)
}

// rawResp is one response read off a raw connection.
type rawResp struct {
	StatusCode int
	Body       string
}

// rawExchange writes raw bytes to the gateway over one TCP connection and
// returns every response read until the gateway closes it or goes quiet.
func rawExchange(t *testing.T, addr, raw string) []rawResp {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	// Not an assertion on time: a bound so a kept-alive connection ends.
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	var out []rawResp
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, rawResp{resp.StatusCode, string(b)})
	}
}

// Finding 1 and 2: a method spelling the upstream folds, an extension
// method, a method override: none is applied without a token.
func TestBypassMethodSpelling(t *testing.T) {
	up := startWSGI(t)
	p := startFencegate(t, bypassYAML(up.URL))
	gw := p.URL("gateway")

	if st, body := send(t, "PUT", gw+"/orders/7", [][2]string{{"Fencing-Token", "5"}}, "owner"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	for _, m := range []string{"put", "Put", "dElEtE", "post", "patch"} {
		t.Run(m, func(t *testing.T) {
			// Without a token, and with a stale one.
			st, body := send(t, m, gw+"/orders/7", nil, "zombie")
			wantCode(t, t.Name(), st, body, 400, "invalid_method")
			st, body = send(t, m, gw+"/orders/7", [][2]string{{"Fencing-Token", "4"}}, "zombie")
			wantCode(t, t.Name(), st, body, 400, "invalid_method")
		})
	}
	for _, m := range []string{"MOVE", "COPY", "PROPPATCH", "MKCOL", "LOCK", "MERGE", "FOO"} {
		t.Run(m, func(t *testing.T) {
			st, body := send(t, m, gw+"/orders/7", nil, "zombie")
			wantCode(t, t.Name(), st, body, 428, "missing_fencing_token")
			st, body = send(t, m, gw+"/orders/7", [][2]string{{"Fencing-Token", "4"}}, "zombie")
			wantCode(t, t.Name(), st, body, 409, "stale_fencing_token")
		})
	}
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		t.Run(h, func(t *testing.T) {
			st, body := send(t, "GET", gw+"/orders/7", [][2]string{{h, "DELETE"}}, "")
			wantCode(t, t.Name(), st, body, 400, "invalid_method")
		})
	}
	if got, want := up.summary(t), "PUT /orders/7@5 owner"; got != want {
		t.Fatalf("upstream applied %q; want only %q", got, want)
	}
}

// Finding 1 on an S3 route: a lower-case method is refused in the S3 XML
// dialect before it is verified or re-signed.
func TestBypassMethodSpellingS3(t *testing.T) {
	e := startS3Env(t, "")
	for _, m := range []string{"put", "Delete"} {
		req, _ := http.NewRequest(m, e.GW+"/"+s3Bucket+"/lower", strings.NewReader("zombie"))
		req.Header.Set("Fencing-Token", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "<Code>invalid_method</Code>") {
			t.Fatalf("%s: %d %s; want 400 S3 XML invalid_method", m, resp.StatusCode, b)
		}
	}
	if got := e.objectBody(t, "lower"); got != "<absent>" {
		t.Fatalf("object written through a lower-case method: %q", got)
	}
}

// Finding 3: headers the key was built from, or the token, cannot be
// dropped (Connection), replaced (trailers) or aliased (X_Tenant) between
// the gateway's decision and the upstream.
func TestBypassHopByHopAndAliases(t *testing.T) {
	up := startWSGI(t)
	p := startFencegate(t, bypassYAML(up.URL))
	gw := p.URL("gateway")
	// The owner of tenant default's document holds token 5. A zombie with
	// token 4 names a fresh tenant (its key zz:/tenants/doc has no fence
	// yet) and tries to make the upstream apply the write to default.
	if st, body := send(t, "PUT", gw+"/tenants/doc", [][2]string{{"Fencing-Token", "5"}, {"X-Tenant", "default"}}, "owner"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	for _, tc := range []struct {
		name string
		hdr  [][2]string
		code string
	}{
		{"Connection drops X-Tenant", [][2]string{{"X-Tenant", "zz"}, {"Connection", "X-Tenant"}}, "invalid_request"},
		{"Connection drops the token", [][2]string{{"X-Tenant", "zz"}, {"Connection", "close, Fencing-Token"}}, "invalid_request"},
		{"X_Tenant alias", [][2]string{{"X-Tenant", "zz"}, {"X_Tenant", "default"}}, "invalid_request"},
		{"comma-joined X-Tenant", [][2]string{{"X-Tenant", "zz,default"}}, "invalid_resource"},
		{"second X-Tenant", [][2]string{{"X-Tenant", "zz"}, {"X-Tenant", "default"}}, "invalid_resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := append([][2]string{{"Fencing-Token", "4"}}, tc.hdr...)
			st, body := send(t, "PUT", gw+"/tenants/doc", hdr, "zombie")
			wantCode(t, t.Name(), st, body, 400, tc.code)
		})
	}
	t.Run("trailer X-Tenant", func(t *testing.T) {
		for _, name := range []string{"X-Tenant", "Fencing-Token"} {
			req, _ := http.NewRequest("PUT", gw+"/tenants/doc", io.NopCloser(strings.NewReader("zombie")))
			req.ContentLength = -1
			req.Header.Set("Fencing-Token", "4")
			req.Header.Set("X-Tenant", "zz")
			req.Trailer = http.Header{name: {"default"}}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantCode(t, t.Name(), resp.StatusCode, string(b), 400, "invalid_request")
		}
	})
	if got, want := up.summary(t), "PUT /tenants/doc@5 owner"; got != want {
		t.Fatalf("upstream applied %q; want only %q", got, want)
	}
}

// Finding 4: a case variant of a case-insensitive route's prefix is that
// route's object, not the catch-all's.
func TestBypassCaseInsensitiveRoute(t *testing.T) {
	up := startWSGI(t)
	p := startFencegate(t, bypassYAML(up.URL))
	gw := p.URL("gateway")
	if st, body := send(t, "PUT", gw+"/docs/report", [][2]string{{"Fencing-Token", "5"}}, "owner"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	for _, path := range []string{"/DOCS/report", "/Docs/REPORT", "//docs/./Report"} {
		st, body := send(t, "PUT", gw+path, [][2]string{{"Fencing-Token", "4"}}, "zombie")
		wantCode(t, t.Name(), st, body, 409, "stale_fencing_token")
		if !strings.Contains(body, `"route":"docs"`) {
			t.Fatalf("%s refused on another route: %s", path, body)
		}
	}
	if got, want := up.summary(t), "PUT /docs/report@5 owner"; got != want {
		t.Fatalf("upstream applied %q; want only %q", got, want)
	}
}

// Finding 9: a 40 KiB key is the client's error (400), not an outage: no
// 503, no ERROR log, and the answer does not echo the key.
func TestBypassLongResourceKey(t *testing.T) {
	up := startWSGI(t)
	p := startFencegate(t, bypassYAML(up.URL))
	gw := p.URL("gateway")
	key := strings.Repeat("k", 40<<10)
	st, body := send(t, "PUT", gw+"/orders/"+key, [][2]string{{"Fencing-Token", "1"}}, "x")
	if len(body) > 1024 {
		t.Fatalf("refusal is %d bytes (%d %.200s…): it echoes the key", len(body), st, body)
	}
	wantCode(t, t.Name(), st, body, 400, "invalid_resource")
	waitFor(t, func() bool { return strings.Contains(p.Log(), `"msg":"invalid_resource"`) })
	for _, line := range strings.Split(p.Log(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Fatalf("ERROR logged for a client's long key: %.300s", line)
		}
		if len(line) > 4096 {
			t.Fatalf("log line of %d bytes: it repeats the key", len(line))
		}
	}
	if got := up.summary(t); got != "" {
		t.Fatalf("upstream applied %q", got)
	}
}

// Finding 11: {host} on a host-pinned route is the configured host, so
// spellings of it are one fence; without match.host validate refuses it.
func TestBypassHostKey(t *testing.T) {
	up := startWSGI(t)
	p := startFencegate(t, bypassYAML(up.URL))
	gw := p.URL("gateway")
	if st, body := send(t, "PUT", gw+"/hosted/x", [][2]string{{"Host", "a.example"}, {"Fencing-Token", "5"}}, "owner"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	for _, host := range []string{"A.EXAMPLE", "a.example.", "A.Example.:80"} {
		st, body := send(t, "PUT", gw+"/hosted/x", [][2]string{{"Host", host}, {"Fencing-Token", "4"}}, "zombie")
		wantCode(t, t.Name(), st, body, 409, "stale_fencing_token")
	}
	// a.example.. is another name: it matches no pinned route, so it falls
	// to the catch-all with its own key, never to a.example's fence.
	if got, want := up.summary(t), "PUT /hosted/x@5 owner"; got != want {
		t.Fatalf("upstream applied %q; want only %q", got, want)
	}

	cfg := filepath.Join(t.TempDir(), "host.yaml")
	os.WriteFile(cfg, []byte(`gateway:
  routes:
    - name: any-host
      match: {path_prefix: /}
      upstream: {url: http://127.0.0.1:9}
      resource: "{host}{path}"
`), 0o600)
	out, err := exec.Command(testenv.BuildBinary(t, "./cmd/fencegate"), "validate", "-c", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "host.yaml:6: gateway.routes[0].resource: {host} needs match.host") {
		t.Fatalf("validate: %v %s; want a file:line refusal of {host}", err, out)
	}
}

// fenced_methods can only narrow, with names validate knows.
func TestBypassFencedMethodsValidation(t *testing.T) {
	bin := testenv.BuildBinary(t, "./cmd/fencegate")
	for _, tc := range []struct{ methods, want string }{
		{"[PUTT, POST]", "m.yaml:7: gateway.routes[0].fenced_methods[0]: unknown method PUTT"},
		{"[GET]", "m.yaml:7: gateway.routes[0].fenced_methods[0]: GET is a read"},
	} {
		cfg := filepath.Join(t.TempDir(), "m.yaml")
		os.WriteFile(cfg, []byte(`gateway:
  routes:
    - name: orders
      match: {path_prefix: /}
      upstream: {url: http://127.0.0.1:9}
      resource: "{path}"
      fenced_methods: `+tc.methods+"\n"), 0o600)
		out, err := exec.Command(bin, "validate", "-c", cfg).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Fatalf("validate %s: %v %s; want %q", tc.methods, err, out, tc.want)
		}
	}
}

// Beyond the list: absolute-form URIs, conflicting framing, encoded
// separators, duplicate and comma-joined tokens, a token in a trailer.
// Raw TCP, so no client library tidies the request first.
func TestBypassRequestSmuggling(t *testing.T) {
	up := startWSGI(t)
	p := startFencegate(t, bypassYAML(up.URL))
	gw := p.URL("gateway")
	addr := strings.TrimPrefix(gw, "http://")
	if st, body := send(t, "PUT", gw+"/orders/7", [][2]string{{"Fencing-Token", "5"}}, "owner"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}

	t.Run("absolute-form URI", func(t *testing.T) {
		rs := rawExchange(t, addr, "PUT http://other.example/orders/7 HTTP/1.1\r\nHost: "+addr+
			"\r\nFencing-Token: 4\r\nContent-Length: 6\r\nConnection: close\r\n\r\nzombie")
		if len(rs) != 1 || rs[0].StatusCode != 409 {
			t.Fatalf("responses %v; want one 409", statuses(rs))
		}
		// The URI's host, not the Host header, picks the route (RFC 9112
		// §3.2.2), and the write is fenced there like any other.
		rs = rawExchange(t, addr, "PUT http://a.example/hosted/y HTTP/1.1\r\nHost: b.example\r\n"+
			"Content-Length: 6\r\nConnection: close\r\n\r\nzombie")
		if len(rs) != 1 || rs[0].StatusCode != 428 {
			t.Fatalf("responses %v; want one 428", statuses(rs))
		}
	})
	t.Run("Content-Length and Transfer-Encoding", func(t *testing.T) {
		// A front proxy using Content-Length would see one request; the
		// gateway uses chunked framing (RFC 9112 §6.1) and sees the
		// smuggled second request as a request of its own: it is fenced
		// like any other.
		smuggled := "PUT /orders/7 HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nzombie"
		chunked := "0\r\n\r\n" + smuggled
		rs := rawExchange(t, addr, "PUT /orders/7 HTTP/1.1\r\nHost: x\r\nFencing-Token: 4\r\n"+
			fmt.Sprintf("Content-Length: %d\r\n", len(chunked))+"Transfer-Encoding: chunked\r\n\r\n"+chunked)
		if len(rs) == 0 || len(rs) > 2 || rs[0].StatusCode != 409 {
			t.Fatalf("responses %v; want 409 for the stale outer request", statuses(rs))
		}
		// After a refusal the gateway may close the connection before the
		// smuggled request is read; whether or not it was answered, it was
		// not applied.
		if len(rs) == 2 && rs[1].StatusCode != 428 {
			t.Fatalf("smuggled request answered %d %s; want 428", rs[1].StatusCode, rs[1].Body)
		}
		if got, want := up.summary(t), "PUT /orders/7@5 owner"; got != want {
			t.Fatalf("upstream applied %q; want only %q", got, want)
		}
		// An outer request the fence admits (a fresh token on another
		// resource) keeps the connection, so the smuggled request is read
		// as the next one and must be answered, as a request of its own
		// without a token: 428, not applied.
		rs = rawExchange(t, addr, "PUT /orders/8 HTTP/1.1\r\nHost: x\r\nFencing-Token: 6\r\n"+
			fmt.Sprintf("Content-Length: %d\r\n", len(chunked))+"Transfer-Encoding: chunked\r\n\r\n"+chunked)
		if len(rs) != 2 || rs[0].StatusCode/100 != 2 || rs[1].StatusCode != 428 {
			t.Fatalf("responses %v; want the admitted outer request's 2xx, then 428 for the smuggled one", statuses(rs))
		}
		if got, want := up.summary(t), "PUT /orders/7@5 owner, PUT /orders/8@6 "; got != want {
			t.Fatalf("upstream applied %q; want only %q", got, want)
		}
	})
	t.Run("two Content-Lengths", func(t *testing.T) {
		rs := rawExchange(t, addr, "PUT /orders/7 HTTP/1.1\r\nHost: x\r\nFencing-Token: 5\r\n"+
			"Content-Length: 6\r\nContent-Length: 60\r\n\r\nzombie")
		if len(rs) != 1 || rs[0].StatusCode != 400 {
			t.Fatalf("responses %v; want one 400 from the server", statuses(rs))
		}
	})
	t.Run("unknown transfer coding", func(t *testing.T) {
		rs := rawExchange(t, addr, "PUT /orders/7 HTTP/1.1\r\nHost: x\r\nFencing-Token: 5\r\n"+
			"Transfer-Encoding: gzip, chunked\r\n\r\n6\r\nzombie\r\n0\r\n\r\n")
		if len(rs) != 1 || rs[0].StatusCode < 400 {
			t.Fatalf("responses %v; want one refusal", statuses(rs))
		}
	})
	t.Run("encoded separators", func(t *testing.T) {
		for _, path := range []string{"/orders%2F7", "/orders/%2e%2e/orders/7", "/orders/7%00", "/orders/7%5C"} {
			rs := rawExchange(t, addr, "PUT "+path+" HTTP/1.1\r\nHost: x\r\nFencing-Token: 4\r\nContent-Length: 6\r\nConnection: close\r\n\r\nzombie")
			if len(rs) != 1 || (rs[0].StatusCode != 400 && rs[0].StatusCode != 409) {
				t.Fatalf("%s: responses %v; want 400 (or 409 when it is /orders/7)", path, statuses(rs))
			}
		}
		for _, path := range []string{"//orders///7", "/orders/./7", "/%6Frders/7"} {
			st, body := rawStatus(t, addr, "PUT "+path+" HTTP/1.1\r\nHost: x\r\nFencing-Token: 4\r\nContent-Length: 6\r\nConnection: close\r\n\r\nzombie")
			if st != 409 {
				t.Fatalf("%s: %d %s; want 409 (one key for every spelling of /orders/7)", path, st, body)
			}
		}
	})
	t.Run("tokens", func(t *testing.T) {
		for _, hdr := range [][][2]string{
			{{"Fencing-Token", "4"}, {"Fencing-Token", "9"}},
			{{"Fencing-Token", "4, 9"}},
			{{"Fencing-Token", "9,4"}},
			{{"Fencing-Token", " 9"}, {"fencing-token", "4"}},
		} {
			st, body := send(t, "PUT", gw+"/orders/7", hdr, "zombie")
			wantCode(t, t.Name(), st, body, 400, "invalid_fencing_token")
		}
		// A token in a trailer only: the header is missing (428); with a
		// header too, the trailer is refused.
		rs := rawExchange(t, addr, "PUT /orders/7 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: Fencing-Token\r\n"+
			"Connection: close\r\n\r\n6\r\nzombie\r\n0\r\nFencing-Token: 9\r\n\r\n")
		if len(rs) != 1 || rs[0].StatusCode != 400 {
			t.Fatalf("token trailer: %v; want 400", statuses(rs))
		}
		rs = rawExchange(t, addr, "PUT /orders/7 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"+
			"Connection: close\r\n\r\n6\r\nzombie\r\n0\r\nFencing-Token: 9\r\n\r\n")
		if len(rs) != 1 || rs[0].StatusCode != 428 {
			t.Fatalf("undeclared token trailer: %v; want 428", statuses(rs))
		}
	})
	if got, want := up.summary(t), "PUT /orders/7@5 owner, PUT /orders/8@6 "; got != want {
		t.Fatalf("upstream applied %q; want only %q", got, want)
	}
}

func rawStatus(t *testing.T, addr, raw string) (int, string) {
	t.Helper()
	rs := rawExchange(t, addr, raw)
	if len(rs) != 1 {
		t.Fatalf("responses %v; want one", statuses(rs))
	}
	return rs[0].StatusCode, rs[0].Body
}

func statuses(rs []rawResp) []string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%d %.200s", r.StatusCode, r.Body))
	}
	return s
}
