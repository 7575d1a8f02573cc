package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// The tests below run plain-http HTTP routes over upstreamconn.Transport, the
// adapter's default (and `fencegate serve`'s) client for http:// upstreams.

// peers records the upstream connections (remote addresses) requests came on.
type peers struct {
	mu    sync.Mutex
	addrs map[string]int
}

func (p *peers) add(r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addrs == nil {
		p.addrs = make(map[string]int)
	}
	p.addrs[r.RemoteAddr]++
}

func (p *peers) conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.addrs)
}

// TestHTTPRouteKeepAlive: writes through an HTTP route reuse one upstream
// connection; an upstream closing after each answer gets a new one each time.
func TestHTTPRouteKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		close  bool
		want   int
	}{
		// A request without a body reuses the pooled connection.
		{"keep-alive", "DELETE", false, 1},
		{"upstream closes", "DELETE", true, 5},
		// A request with a body goes on a connection of its own: an
		// upstream that answers without reading it could otherwise read
		// the body as the next request and hand its answer to another
		// write (docs/upstreams.md).
		{"body", "PUT", false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p peers
			g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p.add(r)
				if tc.close {
					w.Header().Set("Connection", "close")
				}
				io.Copy(w, r.Body)
			}))
			for i := range 5 {
				body := ""
				if tc.method == "PUT" {
					body = "v" + string(rune('0'+i))
				}
				if st, got := do(t, tc.method, g.URL+"/orders/1", tok("1"), body); st != 200 || got != body {
					t.Fatalf("write %d: %d %q", i, st, got)
				}
			}
			if n := p.conns(); n != tc.want {
				t.Fatalf("%d upstream connections; want %d", n, tc.want)
			}
		})
	}
}

// TestHTTPRouteWriteNotResent: a pooled connection that fails after the
// write went out (the upstream read it, then dropped the connection
// unanswered) is answered 502 and the write is never sent again: applied
// or not, a copy landing later could overtake a newer token's write. A GET
// on such a connection is sent again, once.
func TestHTTPRouteWriteNotResent(t *testing.T) {
	var seen atomic.Int64
	var drop atomic.Bool
	g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		seen.Add(1)
		if drop.Load() {
			drop.Store(false)
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.Write([]byte("ok"))
	}))
	if st, _ := do(t, "PUT", g.URL+"/orders/1", tok("1"), "a"); st != 200 {
		t.Fatalf("first write: %d", st)
	}
	seen.Store(0)
	drop.Store(true)
	st, body := do(t, "PUT", g.URL+"/orders/1", tok("1"), "b")
	if st != http.StatusBadGateway || refusalOf(t, body).Error != "upstream_unavailable" {
		t.Fatalf("write on a dropped connection: %d %s; want 502 upstream_unavailable", st, body)
	}
	if n := seen.Load(); n != 1 {
		t.Fatalf("the upstream received the write %d times; want 1", n)
	}

	if st, _ := do(t, "GET", g.URL+"/orders/1", nil, ""); st != 200 {
		t.Fatalf("a read pooling a connection again: %d", st)
	}
	seen.Store(0)
	drop.Store(true)
	if st, body := do(t, "GET", g.URL+"/orders/1", nil, ""); st != 200 || body != "ok" {
		t.Fatalf("read on a dropped connection: %d %q; want 200, sent again", st, body)
	}
	if n := seen.Load(); n != 2 {
		t.Fatalf("the upstream received the read %d times; want 2", n)
	}
}

// TestHTTPRouteStreamsAnswer: an answer of unknown length reaches the
// client as the upstream writes it, not when it ends.
func TestHTTPRouteStreamsAnswer(t *testing.T) {
	next := make(chan struct{})
	g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first\n"))
		http.NewResponseController(w).Flush()
		<-next
		w.Write([]byte("second\n"))
	}))
	defer func() {
		select {
		case <-next:
		default:
			close(next)
		}
	}()
	resp, err := http.Get(g.URL + "/orders/1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(next)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// TestHTTPRouteCancel: a client that gives up ends the upstream request
// (its connection is closed, so the upstream's context ends too).
func TestHTTPRouteCancel(t *testing.T) {
	arrived := make(chan struct{})
	ended := make(chan struct{})
	g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // net/http watches the connection once the body is read
		close(arrived)
		<-r.Context().Done()
		close(ended)
	}))
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "PUT", g.URL+"/orders/1", strings.NewReader("x"))
	req.Header.Set("Fencing-Token", "1")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v; want context.Canceled", err)
	}
	<-ended // the upstream saw its request end; a hang here is the failure
}

// TestHTTPRouteInterimAndTrailers: 1xx answers (103 Early Hints) are passed
// on before the final one, and the answer's trailers follow its body.
func TestHTTPRouteInterimAndTrailers(t *testing.T) {
	g := newTestGatewayFor(t, ordersRoute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Trailer", "X-Checksum")
		w.Write([]byte("body"))
		w.Header().Set("X-Checksum", "abc")
	}))
	var interim []int
	var link string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		interim = append(interim, code)
		link = h.Get("Link")
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", g.URL+"/orders/1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "body" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if len(interim) != 1 || interim[0] != http.StatusEarlyHints || link != "</style.css>; rel=preload" {
		t.Fatalf("interim answers %v (Link %q); want one 103 with the Link", interim, link)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Fatalf("trailer X-Checksum %q; want abc", got)
	}
}

// TestHTTPRouteInjectedHeaderSurvivesConnection: a worker cannot strip or
// replace the credential the route injects. Naming it in Connection (it is
// absent from the request, so the gateway allows the Connection value)
// removes only the worker's own headers, before injection; a copy of its
// own is replaced. The upstream always sees the route's value, once.
func TestHTTPRouteInjectedHeaderSurvivesConnection(t *testing.T) {
	var mu sync.Mutex
	var got []string
	route := `
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: UPSTREAM, headers: {X-Api-Key: route-secret}}
      resource: "{path}"
`
	g := newTestGatewayFor(t, route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header["X-Api-Key"]
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
	}))
	for _, tc := range []struct {
		name string
		h    map[string][]string
	}{
		{"named in Connection", map[string][]string{"Fencing-Token": {"1"}, "Connection": {"X-Api-Key"}}},
		{"named, lower case", map[string][]string{"Fencing-Token": {"2"}, "Connection": {"keep-alive, x-api-key"}}},
		{"own copy", map[string][]string{"Fencing-Token": {"3"}, "X-Api-Key": {"worker-forged"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, body := do(t, "PUT", g.URL+"/orders/1", tc.h, "v"); st != 200 {
				t.Fatalf("write: %d %s", st, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != "route-secret" {
				t.Fatalf("upstream saw X-Api-Key %q; want the route's value once", got)
			}
		})
	}
}
