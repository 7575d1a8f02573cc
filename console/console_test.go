package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/telemetry"
)

type fakeFences []fencegate.FenceState

func (f fakeFences) ListFences(ctx context.Context, prefix, after string, limit int) ([]fencegate.FenceState, error) {
	return f, nil
}

func (f fakeFences) State(ctx context.Context, resource string) (fencegate.FenceState, error) {
	return f[0], nil
}

type fakeStatus struct{}

func (fakeStatus) Status(ctx context.Context) Status { return Status{Ready: true, FenceMode: "local"} }

// TestEscaping: a raw key and owner with markup (as a store written by an
// older version, or a header template, may hold) are escaped on every page
// that shows them, and a hostile trace id cannot make a javascript: link.
func TestEscaping(t *testing.T) {
	const key = `/k/<script>alert("k")</script>'&`
	const owner = `"><img src=x onerror=alert(1)>`
	ring := telemetry.NewRefusals(4)
	ring.Add(telemetry.Refusal{Time: time.Now(), Resource: key, Owner: owner, Code: "stale_fencing_token",
		TraceID: `javascript:alert(1)//"><script>`})
	c := &Console{Fences: fakeFences{{Resource: key, Owner: owner, Highest: 3}}, Status: fakeStatus{},
		Refusals: ring, JaegerUI: "http://jaeger.example:16686"}
	c.Fence = c.Fences.(fakeFences)
	mux := http.NewServeMux()
	if err := c.Register(mux); err != nil {
		t.Fatal(err)
	}
	mux.Handle("GET /v1/fences", c.FenceList())
	for _, path := range []string{"/fences", "/fence?resource=" + url.QueryEscape(key), "/refusals"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		body, _ := io.ReadAll(w.Body)
		b := string(body)
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", path, w.Code, b)
		}
		for _, bad := range []string{`<script>alert`, `<img src=x`, `href="javascript:`} {
			if strings.Contains(b, bad) {
				t.Errorf("%s contains %q unescaped", path, bad)
			}
		}
		if !strings.Contains(b, `&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;&#39;&amp;`) {
			t.Errorf("%s lacks the escaped key", path)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
	}
}

type fakeInFlight map[string]int

func (f fakeInFlight) InFlight(resource string) int { return f[resource] }

// TestDrainedState: a fence not yet marked drained reads "draining" in red
// only while writes to it are in flight; with none it is awaiting its first
// write (a fence raised by a lease or by hand, or one whose drain another
// replica will do), which is no alarm.
func TestDrainedState(t *testing.T) {
	fences := fakeFences{
		{Resource: "/a", Highest: 5, Ready: true},
		{Resource: "/b", Highest: 6, Ready: false},
		{Resource: "/c", Highest: 7, Ready: false},
	}
	c := &Console{Fences: fences, Fence: fences, InFlight: fakeInFlight{"/c": 1}, Status: fakeStatus{}}
	mux := http.NewServeMux()
	if err := c.Register(mux); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/fences", nil))
	b := w.Body.String()
	for res, want := range map[string]string{
		"/a": `<td class="drained">yes</td>`,
		"/b": `<td class="drained"><span class="muted">awaiting first write</span></td>`,
		"/c": `<td class="drained"><span class="bad">draining</span></td>`,
	} {
		i := strings.Index(b, "<code>"+res+"</code>")
		if i < 0 {
			t.Fatalf("no row for %s in\n%s", res, b)
		}
		row := b[i:]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, want) {
			t.Errorf("row of %s: %s; want %s", res, row, want)
		}
	}
}
