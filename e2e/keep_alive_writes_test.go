package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// upstream.keep_alive_writes keeps the gateway's connection to an upstream
// that reads every body: writes through it reuse one connection, where
// without it each write has a connection of its own; either way every
// write lands once, in order, with its token (the upstream's history).
func TestKeepAliveWrites(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_alive_writes=%v", keep), func(t *testing.T) {
			rec := &recorder.Recorder{}
			var conns atomic.Int64
			srv := httptest.NewUnstartedServer(rec)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			up := fmt.Sprintf("{url: %q, timeout: 10s, keep_alive_writes: %v}", srv.URL, keep)
			gw := startFencegate(t, `
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: `+up+`
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
`)
			const writes = 20
			before := conns.Load()
			for i := 1; i <= writes; i++ {
				if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/k", fmt.Sprint(i), fmt.Sprintf("v%d", i)); st != 200 {
					t.Fatalf("write %d: %d %s", i, st, body)
				}
			}
			// Token 3 after 20 is refused and changes nothing.
			if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/k", "3", "stale"); st != 409 {
				t.Fatalf("stale write: %d %s", st, body)
			}
			opened := conns.Load() - before
			want := make([]string, writes)
			for i := range want {
				want[i] = fmt.Sprintf("PUT v%d@%d", i+1, i+1)
			}
			if got := applied(rec, "/orders/k"); got != strings.Join(want, ", ") {
				t.Fatalf("upstream history %q, want %q", got, strings.Join(want, ", "))
			}
			if keep && opened > 2 {
				t.Errorf("keep_alive_writes: %d writes opened %d upstream connections; want them kept (at most 2)", writes, opened)
			}
			if !keep && opened < writes {
				t.Errorf("without keep_alive_writes %d writes opened only %d upstream connections: a connection that carried a body was used again", writes, opened)
			}
		})
	}
}

// keepRoute is the orders route in front of upstream with the upstream
// options opts (YAML flow fields after url and timeout).
func keepRoute(upstream, opts string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 10s, %s}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
`, upstream, opts)
}

// An upstream that reads write bodies except when a precondition answers
// (304 on If-None-Match from the headers alone, the conditional shortcut)
// takes the unread body for its next request the moment it has answered.
// With keep_alive_writes such a write still goes with Connection: close:
// its body, a write of another resource without a token, is never
// applied, and no answer to it reaches another worker. Checked on what
// each worker got and on the upstream's record of what it applied. Before
// (every write on a kept connection) the hidden write was applied in
// every round.
func TestKeepAliveWritesConditionalShortcut(t *testing.T) {
	up := testenv.PythonServer(t, "testdata/conditional_upstream.py", "/_applied")
	hidden := func(name string) string {
		return "PUT /orders/hidden-" + name + " HTTP/1.1\r\nHost: upstream\r\nContent-Length: 0\r\n\r\n"
	}

	// The upstream really is that kind: directly, on one kept connection,
	// the body of a write answered 304 is applied as a request.
	st, _ := write(t, "PUT", up+"/orders/direct", "", "v")
	if st != 200 {
		t.Fatalf("direct write: %d", st)
	}
	etag := headOf(t, up, "/orders/direct")
	c, err := net.Dial("tcp", strings.TrimPrefix(up, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := hidden("direct")
	fmt.Fprintf(c, "PUT /orders/direct HTTP/1.1\r\nHost: upstream\r\nIf-None-Match: %s\r\nContent-Length: %d\r\n\r\n%s", etag, len(body), body)
	br := bufio.NewReader(c)
	var direct []string
	for range 2 {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("direct: %v (answers so far %q)", err, direct)
		}
		b, _ := io.ReadAll(res.Body)
		direct = append(direct, fmt.Sprintf("%d %s", res.StatusCode, b))
	}
	c.Close()
	if want := "304 |200 PUT /orders/hidden-direct"; strings.Join(direct, "|") != want {
		t.Fatalf("direct answers %q, want %q: the upstream does not behave as this test needs", direct, want)
	}
	before := len(earlyApplieds(t, up))

	gw := startFencegate(t, keepRoute(up, "keep_alive_writes: true"))
	base := gw.URL("gateway")
	if st, b := write(t, "PUT", base+"/orders/a", "1", "first"); st != 200 {
		t.Fatalf("first write: %d %s", st, b)
	}
	etag = headOf(t, up, "/orders/a")
	const rounds, workers, perWorker = 10, 3, 3
	var (
		mu      sync.Mutex
		crossed []string
		sent    = map[string]bool{"/orders/a": true}
	)
	put := func(path, worker, body, ifNoneMatch string, want int) {
		req, _ := http.NewRequest("PUT", base+path, strings.NewReader(body))
		req.Header.Set("Fencing-Token", "1")
		req.Header.Set("X-Worker", worker)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		mu.Lock()
		defer mu.Unlock()
		sent[path] = true
		if err != nil {
			crossed = append(crossed, fmt.Sprintf("%s: %v", worker, err))
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantBody := "PUT " + path
		if want == http.StatusNotModified {
			wantBody = ""
		}
		if resp.StatusCode != want || string(b) != wantBody {
			crossed = append(crossed, fmt.Sprintf("%s got %d %q for %d %q", worker, resp.StatusCode, b, want, wantBody))
		}
	}
	for round := range rounds {
		var wg sync.WaitGroup
		wg.Go(func() { put("/orders/a", "conditional", hidden(fmt.Sprint(round)), etag, http.StatusNotModified) })
		for w := range workers {
			wg.Go(func() {
				for i := range perWorker {
					put(fmt.Sprintf("/orders/r%d-w%d-%d", round, w, i), fmt.Sprintf("w%d", w), "payload", "", 200)
				}
			})
		}
		wg.Wait()
	}
	if len(crossed) > 0 {
		t.Errorf("%d of %d answers were not the answer to the worker's own request: %q",
			len(crossed), rounds*(1+workers*perWorker), crossed)
	}
	hiddenApplied := 0
	for _, a := range earlyApplieds(t, up)[before:] {
		if strings.HasPrefix(a.Path, "/orders/hidden-") {
			hiddenApplied++
		}
		if !sent[a.Path] || a.Token == nil || *a.Token != "1" {
			t.Errorf("upstream applied %s %s (token %v, worker %v): not a write the gateway forwarded as checked",
				a.Method, a.Path, deref(a.Token), deref(a.Worker))
		}
	}
	if hiddenApplied > 0 {
		t.Errorf("the body of a write answered 304 was applied as a write of its own %d times in %d rounds", hiddenApplied, rounds)
	}
}

// headOf is the ETag the conditional upstream gives path now: that of a
// write answered 304 on If-None-Match: * (nothing is applied).
func headOf(t *testing.T, upstream, path string) string {
	t.Helper()
	req, _ := http.NewRequest("PUT", upstream+path, nil)
	req.Header.Set("If-None-Match", "*")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified || resp.Header.Get("ETag") == "" {
		t.Fatalf("%s: %d, ETag %q; want 304 with an ETag", path, resp.StatusCode, resp.Header.Get("ETag"))
	}
	return resp.Header.Get("ETag")
}

// A refusal the gateway cannot foresee (401 to a write without
// credentials, from the headers alone, the body unread) on a
// keep_alive_writes route: the upstream takes the body for its next
// request (what `fencegate doctor` finds), here one whose own body is
// still to come, but the connection is dropped after any answer that is
// not a 2xx, so nothing another worker sends completes it and its answer
// reaches no one. Before, the next write on the connection got it.
func TestKeepAliveWritesRefusalDropsConnection(t *testing.T) {
	up := testenv.PythonServer(t, "testdata/conditional_upstream.py", "/_applied", "auth")
	gw := startFencegate(t, keepRoute(up, "keep_alive_writes: true"))
	base := gw.URL("gateway")
	const rounds, workers, perWorker = 10, 3, 3
	var (
		mu      sync.Mutex
		crossed []string
	)
	put := func(path, worker, body string, auth bool, want int, wantBody string) {
		req, _ := http.NewRequest("PUT", base+path, strings.NewReader(body))
		req.Header.Set("Fencing-Token", "1")
		if auth {
			req.Header.Set("Authorization", "Bearer probe")
		}
		resp, err := http.DefaultClient.Do(req)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			crossed = append(crossed, fmt.Sprintf("%s: %v", worker, err))
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || string(b) != wantBody {
			crossed = append(crossed, fmt.Sprintf("%s got %d %q for %d %q", worker, resp.StatusCode, b, want, wantBody))
		}
	}
	for round := range rounds {
		var wg sync.WaitGroup
		// The hidden write's own body is the start of whatever the
		// connection carries next: it waits for it, the connection looks
		// idle, and the next write on it gets the hidden write's answer.
		hidden := fmt.Sprintf("PUT /orders/hidden-%d HTTP/1.1\r\nHost: upstream\r\nAuthorization: Bearer probe\r\nContent-Length: 20\r\n\r\n", round)
		wg.Go(func() { put(fmt.Sprintf("/orders/r%d-noauth", round), "noauth", hidden, false, 401, "unauthorized") })
		for w := range workers {
			wg.Go(func() {
				for i := range perWorker {
					path := fmt.Sprintf("/orders/r%d-w%d-%d", round, w, i)
					put(path, fmt.Sprintf("w%d", w), "payload", true, 200, "PUT "+path)
				}
			})
		}
		wg.Wait()
	}
	if len(crossed) > 0 {
		t.Errorf("%d of %d answers were not the answer to the worker's own request: %q",
			len(crossed), rounds*(1+workers*perWorker), crossed)
	}
	// What the gateway cannot prevent, and doctor reports: the upstream
	// applied the hidden writes. Checked so that this test keeps
	// exercising an upstream that takes bodies for requests.
	hiddenApplied := 0
	for _, a := range earlyApplieds(t, up) {
		if strings.HasPrefix(a.Path, "/orders/hidden-") {
			hiddenApplied++
		}
	}
	if hiddenApplied == 0 {
		t.Fatalf("the upstream applied no hidden write: it does not behave as this test needs")
	}
}
