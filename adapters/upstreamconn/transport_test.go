package upstreamconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
)

// leanServer is an httptest server counting the connections it accepted.
func leanServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func do(t *testing.T, tr http.RoundTripper, req *http.Request) (int, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Write(b)
}

// Requests without a body share one connection; one with a body is sent
// with Connection: close and has a connection of its own, so an upstream
// that answers without reading a body can never hand its next answer to
// another request.
func TestTransportReusesConnections(t *testing.T) {
	var closes atomic.Int64
	srv, conns := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Close {
			closes.Add(1)
		}
		echo(w, r)
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	for i := 0; i < 5; i++ {
		req, _ := http.NewRequest("DELETE", srv.URL+"/b/k", nil)
		if st, _ := do(t, tr, req); st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for requests without a body; want 1", n)
	}
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("PUT", srv.URL+"/b/k", strings.NewReader("hello"))
		if st, body := do(t, tr, req); st != 200 || body != "hello" {
			t.Fatalf("%d %q", st, body)
		}
	}
	// The first PUT takes the pooled connection, which then closes.
	if n, c := conns.Load(), closes.Load(); n != 3 || c != 3 {
		t.Fatalf("%d connections, %d requests with Connection: close; want 3 and 3 (none kept after a body)", n, c)
	}
}

func TestTransportConnectionClose(t *testing.T) {
	srv, conns := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		echo(w, r)
	})
	tr := newTransport()
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("PUT", srv.URL+"/b/k", strings.NewReader("x"))
		if st, body := do(t, tr, req); st != 200 || body != "x" {
			t.Fatalf("%d %q", st, body)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections; want 3", n)
	}
}

// countingBody records how much of a request body was read.
type countingBody struct {
	r    io.Reader
	n    atomic.Int64
	fail error // returned once the reader is exhausted, instead of EOF
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	if err == io.EOF && b.fail != nil {
		err = b.fail
	}
	return n, err
}
func (b *countingBody) Close() error { return nil }

// A refusal answered to the head of an Expect: 100-continue request is
// passed on and the body is never read from the worker.
func TestTransportExpectContinueRefused(t *testing.T) {
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden) // without reading the body
	})
	tr := newTransport()
	body := &countingBody{r: bytes.NewReader(make([]byte, 1<<20))}
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", body)
	req.ContentLength = 1 << 20
	req.Header.Set("Expect", "100-continue")
	if st, _ := do(t, tr, req); st != http.StatusForbidden {
		t.Fatalf("status %d; want 403", st)
	}
	if n := body.n.Load(); n != 0 {
		t.Fatalf("%d body bytes read; want 0", n)
	}
}

func TestTransportExpectContinueAccepted(t *testing.T) {
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprint(w, len(b))
	})
	tr := newTransport()
	data := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB: several copy steps
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", &countingBody{r: bytes.NewReader(data)})
	req.ContentLength = int64(len(data))
	req.Header.Set("Expect", "100-continue")
	if st, body := do(t, tr, req); st != 200 || body != fmt.Sprint(len(data)) {
		t.Fatalf("%d %q", st, body)
	}
}

// A body of unknown length goes chunked, whole.
func TestTransportChunkedBody(t *testing.T) {
	var got atomic.Int64
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(int64(len(b)))
	})
	tr := newTransport()
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", &countingBody{r: bytes.NewReader(make([]byte, 1<<20+7))})
	req.ContentLength = -1
	if st, _ := do(t, tr, req); st != 200 || got.Load() != 1<<20+7 {
		t.Fatalf("%d, server got %d bytes", st, got.Load())
	}
}

// A worker whose body fails midway: the request fails at once instead of
// waiting for an answer to a request the upstream still reads.
func TestTransportBodyReadError(t *testing.T) {
	srv, _ := leanServer(t, echo)
	tr := newTransport()
	boom := errors.New("worker went away")
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", &countingBody{r: strings.NewReader("half"), fail: boom})
	req.ContentLength = 100
	// net/http's Request.Write passes the body's error on unwrapped.
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), boom.Error()) {
		t.Fatalf("err %v; want %v", err, boom)
	}
}

// An answer abandoned before its end closes its connection (the rest would
// be read as the next answer); the next request gets a fresh one.
func TestTransportUnreadBodyNotReused(t *testing.T) {
	srv, conns := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 100<<10))
	})
	tr := newTransport()
	req, _ := http.NewRequest("GET", srv.URL+"/b/k", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	req, _ = http.NewRequest("GET", srv.URL+"/b/k", nil)
	if st, body := do(t, tr, req); st != 200 || len(body) != 100<<10 {
		t.Fatalf("%d, %d bytes", st, len(body))
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections; want 2", n)
	}
}

// A pooled connection the server closed while it was idle is not used.
func TestTransportIdleClosedByServer(t *testing.T) {
	srv, conns := leanServer(t, echo)
	tr := newTransport()
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", strings.NewReader("a"))
	do(t, tr, req)
	srv.CloseClientConnections()
	for i := 0; conns.Load() == 1 && i < 100; i++ {
		req, _ = http.NewRequest("PUT", srv.URL+"/b/k", strings.NewReader("b"))
		if st, body := do(t, tr, req); st != 200 || body != "b" {
			t.Fatalf("%d %q", st, body)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections; want 2", n)
	}
}

// Cancelling the request ends a wait for an answer that does not come.
func TestTransportCancel(t *testing.T) {
	release := make(chan struct{})
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	tr := newTransport()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/b/k", strings.NewReader("x"))
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v; want context.Canceled", err)
	}
}

// https and other Expect values go through the standard transport.
func TestTransportLeanScope(t *testing.T) {
	for _, tc := range []struct {
		url, expect string
		want        bool
	}{
		{"http://s3.local/b/k", "", true},
		{"http://s3.local/b/k", "100-continue", true},
		{"http://s3.local/b/k", "something-else", false},
		{"https://s3.local/b/k", "", false},
	} {
		req, _ := http.NewRequest("PUT", tc.url, nil)
		if tc.expect != "" {
			req.Header.Set("Expect", tc.expect)
		}
		if got := lean(req); got != tc.want {
			t.Errorf("%s Expect %q: lean %v; want %v", tc.url, tc.expect, got, tc.want)
		}
	}
}

// An upstream that refuses a large body without reading it (and without
// Expect: 100-continue) is answered at once: the body is written by a
// goroutine of its own while the answer is read, so the refusal does not
// wait behind a write the upstream no longer reads.
func TestTransportEarlyAnswerToStreamedBody(t *testing.T) {
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusPreconditionFailed)
	})
	tr := newTransport()
	body := &countingBody{r: bytes.NewReader(make([]byte, 64<<20))}
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", body)
	req.ContentLength = 64 << 20
	if st, _ := do(t, tr, req); st != http.StatusPreconditionFailed {
		t.Fatalf("status %d; want 412", st)
	}
	// And the next request has a working connection.
	req, _ = http.NewRequest("GET", srv.URL+"/b/k", nil)
	if st, _ := do(t, tr, req); st != http.StatusPreconditionFailed {
		t.Fatalf("status %d; want 412", st)
	}
}

// A streamed body that fails midway ends the request with the body's error
// itself (the gateway answers a *http.MaxBytesError with 413).
func TestTransportStreamedBodyReadError(t *testing.T) {
	srv, _ := leanServer(t, echo)
	tr := newTransport()
	boom := errors.New("worker went away")
	req, _ := http.NewRequest("PUT", srv.URL+"/b/k", &countingBody{r: bytes.NewReader(make([]byte, 1<<20)), fail: boom})
	req.ContentLength = 2 << 20
	if _, err := tr.RoundTrip(req); !errors.Is(err, boom) {
		t.Fatalf("err %v; want %v", err, boom)
	}
}

// newTransport is a Transport with the pool limits of the gateway's.
func newTransport() *Transport {
	return NewTransport(&http.Transport{IdleConnTimeout: 90 * time.Second, MaxIdleConnsPerHost: 256})
}

// An answer's head is limited as by net/http's client
// (MaxResponseHeaderBytes): an upstream sending headers without end gets
// an error, not the gateway's memory; the body after a head within the
// limit is not limited.
func TestTransportAnswerHeadLimit(t *testing.T) {
	srv, _ := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := 1
		if r.URL.Path == "/big" {
			n = 200
		}
		for i := 0; i < n; i++ {
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("a", 1000))
		}
		w.Write(bytes.Repeat([]byte("b"), 1<<20))
	})
	tr := NewTransport(&http.Transport{MaxResponseHeaderBytes: 64 << 10})
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("PUT", srv.URL+"/big", strings.NewReader("x"))
	if _, err := tr.RoundTrip(req); !errors.Is(err, errHeadTooLarge) {
		t.Fatalf("a 200 KB head: err %v; want %v", err, errHeadTooLarge)
	}
	req, _ = http.NewRequest("PUT", srv.URL+"/small", strings.NewReader("x"))
	if st, body := do(t, tr, req); st != 200 || len(body) != 1<<20 {
		t.Fatalf("a small head: %d, %d bytes of body", st, len(body))
	}
	if d := NewTransport(&http.Transport{}); d.maxHead != defaultMaxHead {
		t.Fatalf("default limit %d; want %d", d.maxHead, defaultMaxHead)
	}
}

// rawUpstream is a hostile or buggy upstream on a raw TCP listener: serve
// runs on each accepted connection.
func rawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readHead reads a request head (up to its blank line).
func readHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\r\n" {
			return b.String(), nil
		}
	}
}

// An upstream that refuses an Expect: 100-continue request with a final
// answer whose body arrives in several pieces (S3's XML error documents,
// a 412 with an explanation): the answer must reach the caller whole.
// The body writer, told not to send the body, must not close the
// connection the answer is still being read from.
func TestReviewExpectRefusalAnswerNotCut(t *testing.T) {
	const n = 256 << 10
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 262144\r\n\r\n")
		piece := bytes.Repeat([]byte("e"), 4<<10)
		for i := 0; i < n/len(piece); i++ {
			if _, err := c.Write(piece); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		io.Copy(io.Discard, br)
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	body := &countingBody{r: bytes.NewReader(make([]byte, 1<<20))}
	req, _ := http.NewRequest("PUT", url+"/b/k", body)
	req.ContentLength = 1 << 20
	req.Header.Set("Expect", "100-continue")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d; want 403", resp.StatusCode)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || len(got) != n {
		t.Fatalf("answer body: %d of %d bytes, err %v", len(got), n, err)
	}
	if r := body.n.Load(); r != 0 {
		t.Fatalf("%d body bytes read from the worker; want 0", r)
	}
}

// An upstream that answers a streamed write early (413, 403, before
// reading the body) while the worker's body is stalled: the caller gets
// the whole answer at once, as from net/http's client, not only once the
// worker sends more of its body (or the route's timeout fires).
func TestReviewEarlyAnswerNotHeldByStalledBody(t *testing.T) {
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 5\r\n\r\nlarge")
		io.Copy(io.Discard, br)
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write(make([]byte, 8<<10)) // then the worker stalls
	req, _ := http.NewRequest("PUT", url+"/b/k", pr)
	req.ContentLength = 1 << 20
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.status != 413 || r.body != "large" {
			t.Fatalf("%d %q %v", r.status, r.body, r.err)
		}
	case <-time.After(3 * time.Second):
		pw.CloseWithError(io.ErrUnexpectedEOF) // unblock the writer
		<-done
		t.Fatal("the early answer waited for the stalled request body")
	}
}

// Header fields net/http's client refuses to send (a name that is not a
// token, a value with control bytes) are refused here too, rather than
// dropped or sent: a NUL in a value reaches the upstream as is (C servers
// may cut the value there), and a misspelt injected credential would be
// dropped without a word.
func TestReviewInvalidHeaderFieldsRefused(t *testing.T) {
	got := make(chan string, 4)
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		got <- head
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	for _, h := range []struct{ k, v string }{
		{"X-Value", "a\x00b"},
		{"X-Value", "a\x01b"},
		{"X-Bad Name", "v"},
		{"X-Bad:Name", "v"},
	} {
		req, _ := http.NewRequest("PUT", url+"/b/k", strings.NewReader("x"))
		req.Header[h.k] = []string{h.v}
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			head := ""
			select {
			case head = <-got:
			default:
			}
			t.Errorf("%q: %q: sent; upstream got %q", h.k, h.v, head)
		}
	}
	// A value net/http sends (tab, obs-text) still goes.
	req, _ := http.NewRequest("PUT", url+"/b/k", strings.NewReader("x"))
	req.Header.Set("X-Value", "a\tb\xff")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// An upstream that sends an interim answer other than 100 Continue (103
// Early Hints) to an Expect: 100-continue request and then reads the body
// without ever sending 100: the body still goes after the Expect timeout,
// as from net/http's client (RFC 9110 §10.1.1: a client does not wait
// indefinitely), instead of waiting for the route's timeout.
func TestReviewExpectEarlyHintsThenBody(t *testing.T) {
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
		_ = head
		b := make([]byte, 5)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"+string(b))
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("hello")); pw.Close() }()
	req, _ := http.NewRequest("PUT", url+"/b/k", pr)
	req.ContentLength = 5
	req.Header.Set("Expect", "100-continue")
	done := make(chan string, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	select {
	case got := <-done:
		if got != "hello" {
			t.Fatalf("got %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body waited for a 100 Continue after 103 past the Expect timeout")
	}
}

// With KeepBodies, requests with a body keep their connection, inline and
// streamed bodies alike, and go without Connection: close; one the
// upstream answered before its body was sent whole still has a connection
// of its own.
func TestTransportKeepBodies(t *testing.T) {
	var (
		closes atomic.Int64
		mu     sync.Mutex
		from   = map[string]string{} // path -> the client address it came from
	)
	srv, conns := leanServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Close {
			closes.Add(1)
		}
		mu.Lock()
		from[r.URL.Path] = r.RemoteAddr
		mu.Unlock()
		if r.URL.Path == "/early" {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		echo(w, r)
	})
	tr := newTransport()
	tr.KeepBodies = true
	defer tr.CloseIdleConnections()
	big := strings.Repeat("y", 3*inlineBody)
	for i := 0; i < 3; i++ {
		for _, body := range []string{"hello", big} {
			req, _ := http.NewRequest("PUT", srv.URL+"/b/k", strings.NewReader(body))
			if i == 2 {
				req.ContentLength = -1 // chunked, streamed
			}
			if st, got := do(t, tr, req); st != 200 || got != body {
				t.Fatalf("%d, %d bytes; want 200 and the body echoed", st, len(got))
			}
		}
	}
	// Six writes: without KeepBodies six connections. A streamed body's
	// writer may still be finishing when its answer has been read, so the
	// next write can find the connection not yet back in the pool.
	if n, c := conns.Load(), closes.Load(); n > 2 || c != 0 {
		t.Fatalf("%d connections, %d requests with Connection: close; want at most 2 and 0", n, c)
	}
	req, _ := http.NewRequest("PUT", srv.URL+"/early", io.MultiReader(strings.NewReader("z"), &stalled{}))
	req.ContentLength = -1
	if st, _ := do(t, tr, req); st != http.StatusPreconditionFailed {
		t.Fatalf("early answer: status %d", st)
	}
	req, _ = http.NewRequest("PUT", srv.URL+"/after", strings.NewReader("after"))
	if st, got := do(t, tr, req); st != 200 || got != "after" {
		t.Fatalf("after the early answer: %d %q", st, got)
	}
	mu.Lock()
	defer mu.Unlock()
	if from["/after"] == from["/early"] {
		t.Fatalf("the write after the early answer came on its connection (%s): a connection whose body was not sent whole was kept", from["/early"])
	}
}

// stalled is a body that never ends (until its reader gives up).
type stalled struct{}

func (*stalled) Read(p []byte) (int, error) {
	time.Sleep(10 * time.Millisecond)
	p[0] = 'z'
	return 1, nil
}
