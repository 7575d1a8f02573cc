package e2e

// Helpers shared by the e2e tests: requests to a fencegate process, the
// recording upstream, the usual configurations, waiting for its log.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
)

// do sends req with the default client and returns status and body,
// failing the test on a transport error.
func do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// write sends a fenced write and returns status and body.
func write(t testing.TB, method, url string, token string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	return do(t, req)
}

// send makes one request with the given headers (several values per name
// allowed) and returns status and body.
func send(t *testing.T, method, url string, hdr [][2]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range hdr {
		if kv[0] == "Host" {
			req.Host = kv[1]
			continue
		}
		req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
	}
	return do(t, req)
}

// call sends method url with body and headers ("K: v") and returns status
// and body.
func call(t *testing.T, method, url, body string, headers ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return do(t, req)
}

const jsonCT = "Content-Type: application/json"

// waitLog waits (bounded) for a log line holding every one of parts: the
// process's output reaches the test through a pipe, after the reply.
func waitLog(t *testing.T, p *Proc, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, line := range strings.Split(p.Log(), "\n") {
			ok := true
			for _, s := range parts {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q:\n%s", parts, p.log.Tail(10))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acquire takes a one-minute lease and returns its token.
func acquire(t *testing.T, coord, resource, owner string) int64 {
	t.Helper()
	return acquireTTL(t, coord, resource, owner, "1m")
}

// sharedAcquire takes a one-second lease (the shared-fence tests let
// leases lapse) and returns its token.
func sharedAcquire(t *testing.T, coord, resource, owner string) int64 {
	t.Helper()
	return acquireTTL(t, coord, resource, owner, "1s")
}

// acquireTTL takes a lease of ttl through the coordinator's HTTP API and
// returns its token.
func acquireTTL(t *testing.T, coord, resource, owner, ttl string) int64 {
	t.Helper()
	st, body := call(t, "POST", coord+"/v1/leases/acquire", fmt.Sprintf(`{"resource":%q,"owner":%q,"ttl":%q}`, resource, owner, ttl), jsonCT)
	var out struct {
		Token int64 `json:"token"`
	}
	if st != 200 || json.Unmarshal([]byte(body), &out) != nil || out.Token <= 0 {
		t.Fatalf("acquire %s by %s: %d %s", resource, owner, st, body)
	}
	return out.Token
}

func release(t *testing.T, coord, resource, owner string, token int64) {
	t.Helper()
	st, body := call(t, "POST", coord+"/v1/leases/release", fmt.Sprintf(`{"resource":%q,"owner":%q,"token":%d}`, resource, owner, token), jsonCT)
	if st != 200 {
		t.Fatalf("release: %d %s", st, body)
	}
}

// ordersGateway is the gateway section most tests use: one route "orders"
// for /orders/, keyed by path, in front of upstream, with the given upstream
// timeout ("" for the default).
func ordersGateway(upstream, timeout string) string {
	up := fmt.Sprintf("{url: %q}", upstream)
	if timeout != "" {
		up = fmt.Sprintf("{url: %q, timeout: %s}", upstream, timeout)
	}
	return `
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: ` + up + `
      resource: "{path}"
`
}

// gatewayYAML is a gateway on the embedded store in front of upstream.
func gatewayYAML(upstream string) string {
	return ordersGateway(upstream, "10s") + `store:
  embedded: {path: $DIR/fencegate.db}
admin: {listen: $ADMIN}
`
}

// newUpstream is a recording upstream (internal/recorder) and its URL.
func newUpstream(t *testing.T) (*recorder.Recorder, string) {
	rec := &recorder.Recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// applied summarises the writes rec applied to key.
func applied(rec *recorder.Recorder, key string) string {
	return recorder.Summary(rec.HistoryOf(key))
}

// exitCode runs cmd and returns its exit status (-1 if it did not run).
func exitCode(cmd *exec.Cmd) int {
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// getJSON decodes the JSON answer to GET url into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// waitFor waits (bounded: 10s) until cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantCode checks a JSON refusal: status and error code.
func wantCode(t *testing.T, what string, status int, body string, wantStatus int, code string) {
	t.Helper()
	if status != wantStatus || !strings.Contains(body, `"error":"`+code+`"`) {
		t.Fatalf("%s: %d %s; want %d %s", what, status, body, wantStatus, code)
	}
}

// writeResult is one write's status and body, for collecting from
// goroutines.
type writeResult struct {
	status int
	body   string
}

// write2 is a PUT write as a writeResult.
func write2(t *testing.T, url, token, body string) writeResult {
	st, b := write(t, "PUT", url, token, body)
	return writeResult{st, b}
}

// landThrough writes body with token to url until it is applied (200),
// retrying while the gateway answers 503 (a fence that cannot decide yet),
// until deadline; any other answer fails the test.
func landThrough(t *testing.T, url, token, body string, deadline time.Time) {
	t.Helper()
	for {
		st, got, err := tryWrite(url, token, body)
		if err == nil && st == 200 {
			return
		}
		if err == nil && st != 503 {
			t.Fatalf("%s with token %s: %d %s", body, token, st, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s with token %s did not land: %d %s %v", body, token, st, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tryWrite is write without failing the test on a transport error (a
// replica being killed).
func tryWrite(url, token, body string) (int, string, error) {
	return tryWriteTimeout(url, token, body, 20*time.Second)
}

func tryWriteTimeout(url, token, body string, timeout time.Duration) (int, string, error) {
	req, err := http.NewRequest("PUT", url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Fencing-Token", token)
	c := http.Client{Timeout: timeout}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}
