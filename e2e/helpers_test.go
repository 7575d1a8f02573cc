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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
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

// acquire takes a lease and returns its token.
func acquire(t *testing.T, coord, resource, owner string) int64 {
	t.Helper()
	st, body := call(t, "POST", coord+"/v1/leases/acquire", fmt.Sprintf(`{"resource":%q,"owner":%q,"ttl":"1m"}`, resource, owner), jsonCT)
	var out struct{ Token int64 }
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

// gatewayYAML is a gateway on the embedded store in front of upstream.
func gatewayYAML(upstream string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 10s}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
admin: {listen: $ADMIN}
`, upstream)
}

func newUpstream(t *testing.T) (*recorder.Recorder, string) {
	rec := &recorder.Recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func applied(rec *recorder.Recorder, key string) string {
	return recorder.Summary(rec.HistoryOf(key))
}

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

func wantCode(t *testing.T, what string, status int, body string, wantStatus int, code string) {
	t.Helper()
	if status != wantStatus || !strings.Contains(body, `"error":"`+code+`"`) {
		t.Fatalf("%s: %d %s; want %d %s", what, status, body, wantStatus, code)
	}
}

type writeResult struct {
	status int
	body   string
}

func write2(t *testing.T, url, token, body string) writeResult {
	st, b := write(t, "PUT", url, token, body)
	return writeResult{st, b}
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

func sharedAcquire(t *testing.T, coord, resource, owner string) int64 {
	t.Helper()
	in, _ := json.Marshal(map[string]any{"resource": resource, "owner": owner, "ttl": "1s"})
	resp, err := http.Post(coord+"/v1/leases/acquire", "application/json", bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token int64 `json:"token"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(body, &out) != nil || out.Token <= 0 {
		t.Fatalf("acquire %s for %s: %d %s", resource, owner, resp.StatusCode, body)
	}
	return out.Token
}
