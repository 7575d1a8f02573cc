package h1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
