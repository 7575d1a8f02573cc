package s3

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	httpup "github.com/fencegate/fencegate/adapters/http"
)

// ConnBufferSize is the read and write buffer of each upstream connection
// of NewTransport.
const ConnBufferSize = 8 << 10

// Transport carries S3 upstream requests. Plain-http requests without
// Expect: 100-continue (what small PutObjects are) go over its own HTTP/1.1
// connections, written and read in the calling goroutine; everything else
// (https, Expect: 100-continue, upgrades) goes through Std.
//
// Why a client of its own: a forwarded 4 KiB PutObject costs the gateway
// about as much CPU in net/http's client as in everything else together.
// http.Transport runs two goroutines per connection (a read loop and a
// write loop) that hand every request and answer over channels, and it
// dials through a goroutine of its own; with VersityGW's default
// Connection: close that is three goroutines, their wake-ups and the pool
// bookkeeping per request. Here a request is one buffered write of head and
// small body and one buffered read of the answer on the caller's
// goroutine. Request bytes are written by net/http's own Request.Write
// (header validation, framing) and answers parsed by http.ReadResponse.
type Transport struct {
	// Std is the transport of the requests Transport does not carry
	// itself: httpup.NewTransport with ConnBufferSize buffers.
	Std *http.Transport

	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	idleTimeout time.Duration
	maxIdle     int // per host

	mu     sync.Mutex
	idle   map[string][]*leanConn // host:port -> idle connections, oldest first
	sweep  *time.Timer
	closed bool
}

// NewTransport returns the transport for S3 upstreams. Its Std transport is
// the gateway's upstream transport (httpup.NewTransport: no environment
// proxy, the same pool and timeouts) with ConnBufferSize connection buffers
// instead of 64 KiB ones. An S3 request's head and answer are a few KiB,
// and bodies bypass the buffers, so large buffers gain nothing; but every
// new connection allocates and clears them, and VersityGW answers every
// request with Connection: close unless run with --keep-alive.
func NewTransport(tlsConfig *tls.Config) *Transport {
	std := httpup.NewTransport(tlsConfig)
	std.ReadBufferSize, std.WriteBufferSize = ConnBufferSize, ConnBufferSize
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &Transport{
		Std: std, dial: d.DialContext,
		idleTimeout: std.IdleConnTimeout, maxIdle: std.MaxIdleConnsPerHost,
		idle: make(map[string][]*leanConn),
	}
}

// leanConn is one upstream connection of Transport.
type leanConn struct {
	t     *Transport
	addr  string
	conn  net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer // on connWriter: werr is the connection's write error
	werr  error
	idled time.Time // when it was last put in the pool
}

// Connection buffers are recycled: with VersityGW's default
// Connection: close every request has a connection of its own, and
// allocating (and clearing) two buffers per request was over a third of
// the gateway's allocated bytes.
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, ConnBufferSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, ConnBufferSize) }}
)

// close closes c's connection and recycles its buffers; c is not used
// after it.
func (c *leanConn) close() {
	c.conn.Close()
	c.br.Reset(nil)
	readers.Put(c.br)
	c.bw.Reset(nil)
	writers.Put(c.bw)
	c.br, c.bw = nil, nil
}

// connWriter is a leanConn's connection as its bufio.Writer writes to it,
// keeping write errors apart from errors reading the request body.
type connWriter struct{ c *leanConn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.conn.Write(p)
	if err != nil {
		w.c.werr = err
	}
	return n, err
}

// ReadFrom copies a request body to the connection in CopyBufferSize
// steps (bufio.Writer hands a body to it once the head is flushed).
func (w connWriter) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, *bp)
}

// lean reports whether Transport carries req itself.
func lean(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Method == http.MethodConnect {
		return false
	}
	if e := req.Header["Expect"]; len(e) > 1 || len(e) == 1 && !strings.EqualFold(e[0], "100-continue") {
		return false
	}
	return len(req.Header["Upgrade"]) == 0 && len(req.Header["Connection"]) == 0
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !lean(req) {
		return t.Std.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	bodyless := req.Body == nil || req.Body == http.NoBody
	for attempt := 0; ; attempt++ {
		c, reused, err := t.conn(ctx, addr)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := c.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		if reused && bodyless && attempt == 0 && ctx.Err() == nil && !errors.Is(err, errResponseStarted) {
			// A pooled connection the server closed as it was taken: a
			// request without a body is sent again, as http.Transport
			// does (a body, once read from the worker, cannot be).
			continue
		}
		closeBody(req)
		return nil, err
	}
}

// errResponseStarted marks a failure after some of the answer was read.
var errResponseStarted = errors.New("s3 upstream: connection failed in the answer")

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// conn returns an idle connection to addr that is still open, or dials one.
func (t *Transport) conn(ctx context.Context, addr string) (c *leanConn, reused bool, err error) {
	now := time.Now()
	t.mu.Lock()
	for {
		cs := t.idle[addr]
		if len(cs) == 0 {
			break
		}
		c = cs[len(cs)-1]
		cs[len(cs)-1] = nil
		t.idle[addr] = cs[:len(cs)-1]
		if now.Sub(c.idled) < t.idleTimeout && c.br.Buffered() == 0 && alive(c.conn) {
			t.mu.Unlock()
			return c, true, nil
		}
		c.close()
	}
	t.mu.Unlock()
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c = &leanConn{t: t, addr: addr, conn: nc}
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(nc)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(connWriter{c})
	return c, false, nil
}

// put keeps c for the next request to its host, or closes it.
func (t *Transport) put(c *leanConn) {
	c.idled = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.idle[c.addr]) >= t.maxIdle {
		c.close()
		return
	}
	t.idle[c.addr] = append(t.idle[c.addr], c)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
	}
}

// sweepIdle closes the connections idle for longer than idleTimeout.
func (t *Transport) sweepIdle() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep = nil
	left := false
	for addr, cs := range t.idle {
		kept := cs[:0]
		for _, c := range cs {
			if now.Sub(c.idled) >= t.idleTimeout {
				c.close()
				continue
			}
			kept = append(kept, c)
		}
		clear(cs[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, addr)
			continue
		}
		t.idle[addr], left = kept, true
	}
	if left && !t.closed {
		t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
	}
}

// CloseIdleConnections closes the idle connections of both transports.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	for addr, cs := range t.idle {
		for _, c := range cs {
			c.close()
		}
		delete(t.idle, addr)
	}
	t.mu.Unlock()
	t.Std.CloseIdleConnections()
}

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req on c and reads its answer. The answer's body hands c
// back to the pool when read to its end on a connection both sides keep
// open; anything else closes c.
func (c *leanConn) roundTrip(req *http.Request) (*http.Response, error) {
	// Cancelling the request unblocks whatever I/O is under way; the
	// connection is not reused after that.
	stop := context.AfterFunc(req.Context(), func() { c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.close()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	c.werr = nil
	var gate *continueGate
	if len(req.Header["Expect"]) == 1 && req.Body != nil && req.Body != http.NoBody {
		gate = &continueGate{rc: req.Body, c: c, req: req}
		r2 := new(http.Request)
		*r2 = *req
		r2.Body = gate
		req = r2
	}
	werr := req.Write(c.bw)
	if werr == nil {
		werr = c.bw.Flush()
	}
	if gate != nil && gate.final != nil {
		// The upstream answered before the go-ahead (a refusal): the body
		// was not sent, the answer is passed on, the connection closed.
		return c.answer(req, gate.final, stop, false)
	}
	if werr != nil && c.werr == nil {
		// Reading the request body failed (the worker went away, or sent
		// more than allowed): the upstream waits for the rest of a request
		// that will not come.
		return fail(werr)
	}
	for interim := 0; ; interim++ {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			if werr != nil {
				return fail(werr)
			}
			if c.br.Buffered() > 0 || !isEOF(err) {
				err = errors.Join(errResponseStarted, err)
			}
			return fail(err)
		}
		if resp.StatusCode < 200 {
			resp.Body.Close()
			return fail(errors.Join(errResponseStarted, errors.New("s3 upstream: unexpected "+resp.Status)))
		}
		if resp.StatusCode < 200 && interim < 10 {
			continue // 100 Continue (unasked for) and other interim answers
		}
		// An answer to a request not sent whole (the upstream refused it
		// early and closed) is passed on, but the connection is not kept.
		return c.answer(req, resp, stop, werr == nil)
	}
}

// answer hands resp on, its body releasing c.
func (c *leanConn) answer(req *http.Request, resp *http.Response, stop func() bool, reuse bool) (*http.Response, error) {
	reuse = reuse && !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		c.release(stop, reuse)
		return resp, nil
	}
	resp.Body = &leanBody{rc: resp.Body, c: c, stop: stop, reuse: reuse}
	return resp, nil
}

// expectContinueTimeout is how long a request with Expect: 100-continue
// waits for the go-ahead before its body is sent anyway (as net/http's
// client, httpup.NewTransport's ExpectContinueTimeout).
const expectContinueTimeout = time.Second

// continueGate holds back a request body until the upstream answers
// 100 Continue to the head (or expectContinueTimeout passes). Request.Write
// flushes the head before it reads a body that is not in memory, so the
// wait happens in its first Read. A final answer instead of the go-ahead
// ends the request: final keeps it, the body is never read.
type continueGate struct {
	rc     io.ReadCloser
	c      *leanConn
	req    *http.Request
	opened bool
	final  *http.Response
}

var errAnsweredEarly = errors.New("s3 upstream answered before 100 Continue")

func (g *continueGate) Read(p []byte) (int, error) {
	if !g.opened {
		g.opened = true
		if err := g.wait(); err != nil {
			return 0, err
		}
	}
	return g.rc.Read(p)
}

func (g *continueGate) Close() error { return g.rc.Close() }

func (g *continueGate) wait() error {
	c := g.c
	if err := c.bw.Flush(); err != nil {
		return err
	}
	c.conn.SetReadDeadline(time.Now().Add(expectContinueTimeout))
	_, err := c.br.Peek(1)
	// Clearing the deadline may clear the one a cancellation set:
	// the context is checked after it.
	c.conn.SetReadDeadline(time.Time{})
	if cerr := g.req.Context().Err(); cerr != nil {
		return cerr
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && c.br.Buffered() == 0 {
		return nil // no answer yet: the body goes
	}
	if err != nil {
		return err
	}
	for interim := 0; interim < 10; interim++ {
		resp, err := http.ReadResponse(c.br, g.req)
		if err != nil {
			return err
		}
		switch {
		case resp.StatusCode == http.StatusContinue:
			return nil
		case resp.StatusCode >= 200:
			g.final = resp
			return errAnsweredEarly
		}
	}
	return errors.New("s3 upstream: too many interim answers")
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset")
}

// release ends c's use by one request: pooled if reuse and the request's
// context did not fire meanwhile, closed otherwise.
func (c *leanConn) release(stop func() bool, reuse bool) {
	if stop() && reuse {
		c.t.put(c)
		return
	}
	c.close()
}

// leanBody is the body of an answer on a leanConn.
type leanBody struct {
	rc    io.ReadCloser
	c     *leanConn
	stop  func() bool
	reuse bool
	mu    sync.Mutex
	done  bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.done = true
		b.c.release(b.stop, b.reuse && err == io.EOF)
	}
	return n, err
}

// Close closes the connection unless the body was read to its end (the
// rest of an answer left unread would be taken for the next one).
func (b *leanBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		b.c.release(b.stop, false)
	}
	return nil
}

// CopyBufferSize is the step in which Transport copies a request body to
// the upstream connection. net/http's client copies in 32 KiB steps: 512
// reads from the worker's socket and as many writes to the upstream's per
// 16 MiB object, where a direct client (the SDK writing a bytes.Reader)
// hands the kernel its whole body in one write. A read returns what the
// worker's socket holds, up to the step.
const CopyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, CopyBufferSize); return &b }}
