package relay_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
)

// seen is what one side of a forward saw: the upstream's request or the
// client's answer, rendered for comparison.
type seen struct {
	upstream string
	answer   string
}

// TestForwardMatchesReverseProxy is a differential test of Proxy against
// httputil.ReverseProxy, whose header rules it keeps: every request below
// goes through both, over the same transport and rewrite, and the upstream
// must receive the same request and the client the same answer, byte for
// byte in every header. A rule forward forgets (a hop-by-hop header that
// leaks, a client X-Forwarded-For kept, a trailer not relayed) fails here.
func TestForwardMatchesReverseProxy(t *testing.T) {
	var mu sync.Mutex
	var got string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		mu.Lock()
		got = render(r.Method+" "+r.RequestURI, r.Header, r.Trailer, body, err) +
			fmt.Sprintf("\nlength %d te %v", r.ContentLength, r.TransferEncoding)
		mu.Unlock()
		answer(w, r)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	rewrite := func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = ""
		pr.SetXForwarded()
	}
	transport := upstreamconn.NewTransport(relay.NewTransport(nil))
	defer transport.CloseIdleConnections()
	lean := relay.NewProxy(transport, rewrite)
	oracle := &httputil.ReverseProxy{Rewrite: rewrite, Transport: transport}

	// Both front ends set a header of their own before forwarding, as a
	// gateway may: an upstream's Connection naming it must not remove it.
	leanSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Gateway", "g")
		if err := lean.Forward(w, r); err != nil {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer leanSrv.Close()
	oracleSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Gateway", "g")
		oracle.ServeHTTP(w, r)
	}))
	defer oracleSrv.Close()

	run := func(t *testing.T, srv *httptest.Server, raw string) seen {
		t.Helper()
		mu.Lock()
		got = ""
		mu.Unlock()
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		interim := ""
		var res *http.Response
		for {
			res, err = http.ReadResponse(br, &http.Request{Method: strings.Fields(raw)[0]})
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode >= 200 {
				break
			}
			interim += render("interim "+res.Status, res.Header, nil, nil, nil) + "\n"
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		res.Header.Del("Date")
		mu.Lock()
		defer mu.Unlock()
		return seen{upstream: got, answer: interim + render(res.Status, res.Header, res.Trailer, body, err) +
			fmt.Sprintf("\nlength %d te %v", res.ContentLength, res.TransferEncoding)}
	}

	for _, tc := range []struct{ name, head, body string }{
		{"plain", "PUT /orders/1 HTTP/1.1\r\nHost: x\r\nUser-Agent: w/1\r\nContent-Length: 3\r\n", "abc"},
		{"no user agent", "PUT /orders/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n", "abc"},
		{"hop-by-hop", "PUT /orders/1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n" +
			"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\n" +
			"Upgrade: h2c\r\nTe: trailers, deflate\r\nX-Kept: 2\r\nContent-Length: 3\r\n", "abc"},
		{"te without trailers", "GET /orders/1 HTTP/1.1\r\nHost: x\r\nTe: deflate\r\n", ""},
		{"client forwarding headers", "PUT /orders/1 HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.1\r\n" +
			"X-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nForwarded: for=10.0.0.1\r\nContent-Length: 1\r\n", "a"},
		{"query to clean", "PUT /orders/1?a=1;b=2&c=%zz&d=%41 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n", "a"},
		{"query kept", "PUT /orders/1?x-id=PutObject&b=%20 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n", "a"},
		{"repeated header", "PUT /orders/1 HTTP/1.1\r\nHost: x\r\nX-Multi: 1\r\nX-Multi: 2\r\nContent-Length: 1\r\n", "a"},
		{"chunked with trailer", "PUT /orders/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n",
			"3\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n"},
		{"empty body", "DELETE /orders/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n", ""},
		{"answer hop-by-hop", "GET /orders/1?answer=hop HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer names the gateway's header", "GET /orders/1?answer=named HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer trailers", "GET /orders/1?answer=trailers HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer undeclared trailer", "GET /orders/1?answer=undeclared HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer streamed", "GET /orders/1?answer=stream HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer event stream", "GET /orders/1?answer=events HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer 1xx", "GET /orders/1?answer=early HTTP/1.1\r\nHost: x\r\n", ""},
		{"answer 304", "GET /orders/1?answer=304 HTTP/1.1\r\nHost: x\r\n", ""},
		{"head", "HEAD /orders/1 HTTP/1.1\r\nHost: x\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.head + "\r\n" + tc.body
			want := run(t, oracleSrv, raw)
			have := run(t, leanSrv, raw)
			if want.upstream != have.upstream {
				t.Errorf("upstream saw\n%s\nwant (ReverseProxy)\n%s", have.upstream, want.upstream)
			}
			if want.answer != have.answer {
				t.Errorf("client got\n%s\nwant (ReverseProxy)\n%s", have.answer, want.answer)
			}
		})
	}
}

// answer is the upstream's answer for the ?answer= the request names.
func answer(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	switch r.URL.Query().Get("answer") {
	case "hop":
		h.Set("Connection", "X-Secret")
		h.Set("X-Secret", "s")
		h.Set("Keep-Alive", "timeout=1")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("X-End", "e")
		w.Write([]byte("hop"))
	case "named":
		h.Set("Connection", "X-Gateway, X-Own")
		h.Set("X-Own", "o")
		h.Set("X-Gateway", "upstream")
		w.Write([]byte("named"))
	case "trailers":
		h.Set("Trailer", "X-Sum, X-Other")
		w.Write([]byte("body"))
		h.Set("X-Sum", "1")
		h.Set("X-Other", "2")
	case "undeclared":
		w.Write([]byte("body"))
		w.(http.Flusher).Flush()
		h.Set(http.TrailerPrefix+"X-Late", "3")
	case "stream":
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
		}
	case "events":
		h.Set("Content-Type", "Text/Event-Stream; charset=utf-8")
		h.Set("Content-Length", "9")
		w.Write([]byte("data: 1\n\n"))
	case "early":
		h.Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		h.Del("Link")
		h.Set("X-Final", "f")
		w.Write([]byte("final"))
	case "304":
		h.Set("Etag", `"1"`)
		w.WriteHeader(http.StatusNotModified)
	default:
		h.Set("X-Answer", "a")
		w.Write([]byte("ok"))
	}
}

// render writes a start line, headers and trailers in sorted order, and
// the body.
func render(start string, h, trailer http.Header, body []byte, err error) string {
	var b strings.Builder
	b.WriteString(start)
	for _, part := range []struct {
		name string
		h    http.Header
	}{{"header", h}, {"trailer", trailer}} {
		keys := make([]string, 0, len(part.h))
		for k := range part.h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "\n%s %s: %q", part.name, k, part.h[k])
		}
	}
	fmt.Fprintf(&b, "\nbody %q err %v", body, err)
	return b.String()
}

// TestForwardUpgrade: a protocol upgrade (Connection: Upgrade) still
// switches and carries bytes both ways (the ReverseProxy path), and an
// upstream switching protocols unasked is a transport error, not a
// connection handed over.
func TestForwardUpgrade(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		if r.Header.Get("Upgrade") != "echo" {
			return // the unasked switch: nothing more
		}
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo "+line)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	p := relay.NewProxy(upstreamconn.NewTransport(relay.NewTransport(nil)), func(pr *httputil.ProxyRequest) { pr.SetURL(target) })
	var mu sync.Mutex
	var ferr error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := p.Forward(w, r)
		mu.Lock()
		ferr = err
		mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()

	c, br := switchTo(t, srv, "")
	io.WriteString(c, "hello\n")
	if line, _ := br.ReadString('\n'); line != "echo hello\n" {
		t.Fatalf("after the switch: %q", line)
	}

	c2, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || res.StatusCode != http.StatusBadGateway {
		t.Fatalf("unasked switch: %v %v; want 502", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ferr == nil || !strings.Contains(strings.ToLower(ferr.Error()), "switch") {
		t.Fatalf("Forward error %v; want the unasked switch", ferr)
	}
}

// switchTo asks srv for a switch to the echo protocol, with the extra
// header lines given ("" for none), and returns the switched connection
// (closed when the test ends) and its reader.
func switchTo(t *testing.T, srv *httptest.Server, header string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n"+header+"\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	return c, br
}
