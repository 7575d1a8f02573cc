package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// earlyApplied is one request the early-answering upstream acted on.
type earlyApplied struct {
	Method string  `json:"method"`
	Path   string  `json:"path"`
	Token  *string `json:"token"`
	Worker *string `json:"worker"`
	Close  bool    `json:"close"`
}

func startEarlyUpstream(t *testing.T) string {
	t.Helper()
	return testenv.PythonServer(t, "testdata/early_answer_upstream.py", "/_applied")
}

func earlyApplieds(t *testing.T, upstream string) []earlyApplied {
	t.Helper()
	var a []earlyApplied
	getJSON(t, upstream+"/_applied", &a)
	return a
}

// smuggled is a request body that an upstream answering without reading
// it takes for a request of its own: a write to another resource, without
// a token.
const smuggled = "PUT /orders/smuggled HTTP/1.1\r\nHost: upstream\r\nContent-Length: 0\r\n\r\n"

// An upstream that answers writes without reading their bodies (Python's
// http.server) reads a body as its next request. Through the gateway, that
// request's answer must never reach another worker, and the request itself
// is never applied: the gateway sends writes with Connection: close and
// keeps no connection after a body. Checked on what each worker got and
// on what the upstream recorded.
func TestEarlyAnswerNeverCrossesWorkers(t *testing.T) {
	up := startEarlyUpstream(t)

	// The upstream really is that kind: directly, on one connection, the
	// body is answered as a request of its own.
	c, err := net.Dial("tcp", strings.TrimPrefix(up, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "PUT /orders/direct HTTP/1.1\r\nHost: upstream\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled)
	br := bufio.NewReader(c)
	var direct []string
	for range 2 {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("direct: %v (answers so far %q)", err, direct)
		}
		b, _ := io.ReadAll(res.Body)
		direct = append(direct, string(b))
	}
	c.Close()
	if want := []string{"PUT /orders/direct", "PUT /orders/smuggled"}; strings.Join(direct, "|") != strings.Join(want, "|") {
		t.Fatalf("direct answers %q, want %q: the upstream does not behave as this test needs", direct, want)
	}
	before := len(earlyApplieds(t, up))

	gw := startFencegate(t, gatewayYAML(up))
	const rounds, workers, perWorker = 15, 4, 3
	var (
		mu      sync.Mutex
		crossed []string
		sent    = map[string]bool{}
	)
	for round := range rounds {
		var wg sync.WaitGroup
		put := func(path, worker, body string) {
			defer wg.Done()
			req, _ := http.NewRequest("PUT", gw.URL("gateway")+path, strings.NewReader(body))
			req.Header.Set("Fencing-Token", "1")
			req.Header.Set("X-Worker", worker)
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
			if want := "PUT " + path; resp.StatusCode != 200 || string(b) != want {
				crossed = append(crossed, fmt.Sprintf("%s got %d %q for %s", worker, resp.StatusCode, b, want))
			}
		}
		wg.Add(1)
		go put(fmt.Sprintf("/orders/r%d-early", round), "early", smuggled)
		for w := range workers {
			wg.Add(1)
			go func() {
				for i := range perWorker {
					wg.Add(1)
					put(fmt.Sprintf("/orders/r%d-w%d-%d", round, w, i), fmt.Sprintf("w%d", w), "payload")
				}
				wg.Done()
			}()
		}
		wg.Wait()
	}
	if len(crossed) > 0 {
		t.Errorf("%d of %d answers were not the answer to the worker's own request: %q",
			len(crossed), rounds*(1+workers*perWorker), crossed)
	}

	// The upstream's record: only the requests the gateway forwarded, each
	// with its token, each asked to close its connection; the body's
	// request never acted on.
	got := earlyApplieds(t, up)[before:]
	for _, a := range got {
		if !sent[a.Path] || a.Token == nil || *a.Token != "1" || !a.Close {
			t.Errorf("upstream applied %s %s (token %v, worker %v, close %v): not a write the gateway forwarded as checked",
				a.Method, a.Path, deref(a.Token), deref(a.Worker), a.Close)
		}
	}
	if len(got) != len(sent) {
		t.Errorf("upstream applied %d writes, the workers sent %d", len(got), len(sent))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
