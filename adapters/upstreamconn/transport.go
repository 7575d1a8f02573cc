// Package upstreamconn holds the gateway's connections to upstreams: its
// HTTP/1.1 client, a RoundTripper that
// writes a request and reads its answer on the caller's goroutine over
// pooled plain-http connections, with net/http's own framing
// (Request.Write, http.ReadResponse). S3 routes and plain-http HTTP routes
// forward through it; https (HTTP/2), upgrades and other Expect values go
// through net/http's transport.
package upstreamconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ConnBufferSize is the read and write buffer of each upstream connection.
// A request's head and answer are a few KiB and bodies bypass the
// buffers, so large buffers gain nothing; but every new connection takes
// them (VersityGW answers every request with Connection: close unless run
// with --keep-alive).
const ConnBufferSize = 8 << 10

// Transport carries upstream requests. Plain-http requests (without
// upgrades, Connection headers or Expect values other than 100-continue)
// go over its own HTTP/1.1 connections, written and read in the calling
// goroutine; everything else (https, upgrades) goes through Std.
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
	// itself.
	Std *http.Transport

	// KeepBodies keeps the connections of requests with a body, which
	// otherwise go with Connection: close (see RoundTrip). Set it only for
	// an upstream of a kind known to read or discard the body of every
	// request it answers, or to close the connection after the answer:
	// Google Cloud Storage's front ends, and emulators
	// built on Go's net/http server (fake-gcs-server), which discards an
	// unread body of up to 256 KiB and closes the connection after a
	// larger one. A connection that carried a body is kept only when the
	// body was sent whole before the answer began, the answer is a 2xx
	// and it was read to its end: an answer that came before the body, or
	// a refusal (304, 401, 404, 412, a redirect...), is what a server
	// sends without reading the body, and whatever the body holds must not
	// be read as the next request's answer.
	KeepBodies bool

	// CloseShortcuts, with KeepBodies, still sends with Connection: close
	// the requests with a body that servers commonly answer before
	// reading it: those carrying a precondition (If-Match, If-None-Match,
	// If-Modified-Since, any If-* field) or an Expect. An upstream that
	// answers those unread (a conditional shortcut: 304 or 412 from the
	// headers alone) takes the body for its next request the moment it
	// has answered, before the gateway can drop the connection; with
	// Connection: close it never reads it. For upstreams merely observed
	// to read bodies (upstream.keep_alive_writes), not for the stores
	// whose HTTP parsers frame every body (Azure, GCS). With it, writes
	// handed to Std over HTTP/1.1 (an https upstream without HTTP/2,
	// upgrades) close too: net/http's client keeps a connection after any
	// answer, and the checks above are this client's.
	CloseShortcuts bool

	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	idleTimeout time.Duration // 0: no limit
	maxIdle     int           // per host
	maxHead     int64         // bytes an answer's head may take

	mu     sync.Mutex
	idle   map[string][]*leanConn // host:port -> idle connections, oldest first
	sweep  *time.Timer
	closed bool
}

// NewTransport returns a Transport falling back to std (not nil), whose
// pool limits it takes: IdleConnTimeout (0: none), MaxIdleConnsPerHost
// (0: http.DefaultMaxIdleConnsPerHost) and MaxResponseHeaderBytes (0:
// defaultMaxHead), as net/http reads them.
func NewTransport(std *http.Transport) *Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	maxIdle := std.MaxIdleConnsPerHost
	if maxIdle == 0 {
		maxIdle = http.DefaultMaxIdleConnsPerHost
	}
	maxHead := std.MaxResponseHeaderBytes
	if maxHead <= 0 {
		maxHead = defaultMaxHead
	}
	return &Transport{
		Std: std, dial: d.DialContext,
		idleTimeout: std.IdleConnTimeout, maxIdle: maxIdle, maxHead: maxHead,
		idle: make(map[string][]*leanConn),
	}
}

// leanConn is one upstream connection of Transport.
type leanConn struct {
	t      *Transport
	addr   string
	conn   net.Conn
	peek   func() connState // conn's read side, without waiting (peekCheck)
	expire func()           // makes conn's blocked I/O return at once
	br     *bufio.Reader
	bw     *bufio.Writer // on connWriter: werr is the connection's write error
	werr   error
	wdone  chan error // the body writer's result; nil: none running
	// Whether an answer began before its request was sent whole, for a
	// connection that may be kept after a body: watch is set for such a
	// request; before each write of its bytes (connWriter) the answer's
	// start is looked for, by began (bytes of the answer read meanwhile,
	// connReader: a body written by a goroutine of its own) or, with
	// nothing reading, by a peek (inline bodies; not before the first
	// write, which no answer can precede). early records a find.
	watch  bool
	inline bool
	writes int
	began  atomic.Bool
	early  atomic.Bool
	idled  time.Time // when it was last put in the pool
	rleft  int64     // bytes br may still read from conn (connReader)
	rec    *[]byte   // while an answer's head is read: the bytes read (connReader)
}

// defaultMaxHead is net/http's client limit on an answer's head, which
// ReadResponse alone does not enforce: an upstream sending an endless
// header must not take the gateway's memory.
const defaultMaxHead = 10 << 20

var errHeadTooLarge = errors.New("upstream: answer headers exceed the limit")

// connReader is a leanConn's connection as its bufio.Reader reads it:
// while an answer's head is read, at most rleft bytes.
type connReader struct{ c *leanConn }

func (r connReader) Read(p []byte) (int, error) {
	if r.c.rleft <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > r.c.rleft {
		p = p[:r.c.rleft]
	}
	n, err := r.c.conn.Read(p)
	r.c.rleft -= int64(n)
	if n > 0 {
		r.c.began.Store(true)
	}
	if r.c.rec != nil {
		*r.c.rec = append(*r.c.rec, p[:n]...)
	}
	return n, err
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
	bw, wdone := c.bw, c.wdone
	c.br, c.bw, c.wdone = nil, nil, nil
	if wdone != nil {
		// A body writer still runs (the upstream answered before the
		// body was sent whole): nothing more of it reaches the upstream
		// on the closed connection, but the writer may still wait on the
		// worker's body, and the answer must not wait with it (the
		// gateway's client would get it only when it sends more, or the
		// route's timeout fires). Its buffer is recycled once it is done.
		go func() {
			<-wdone
			bw.Reset(nil)
			writers.Put(bw)
		}()
		return
	}
	bw.Reset(nil)
	writers.Put(bw)
}

// connWriter is a leanConn's connection as its bufio.Writer writes to it,
// keeping write errors apart from errors reading the request body.
type connWriter struct{ c *leanConn }

func (w connWriter) Write(p []byte) (int, error) {
	if c := w.c; c.watch {
		if c.began.Load() || c.inline && c.writes > 0 && c.peek() != connIdle {
			c.early.Store(true)
		}
		c.writes++
	}
	n, err := w.c.conn.Write(p)
	if err != nil {
		w.c.werr = err
	}
	return n, err
}

// ReadFrom copies a request body to the connection in StreamStep
// steps (bufio.Writer hands a body to it once the head is flushed).
// net/http's client copies in 32 KiB steps: 512 reads from the worker's
// socket and as many writes to the upstream's per 16 MiB object, where a
// direct client hands the kernel its whole body in one write.
func (w connWriter) ReadFrom(r io.Reader) (int64, error) {
	bp := StreamBuffer()
	defer PutStreamBuffer(bp)
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, *bp)
}

// connState is what a peek at a connection's read side finds.
type connState int

const (
	connIdle    connState = iota // open, nothing to read
	connData                     // bytes are waiting
	connGone                     // end of stream, or an error
	connUnknown                  // the platform cannot peek without waiting
)

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
//
// A request with a body sent over HTTP/1.1 goes with Connection: close and
// its connection is not used again. Nothing in HTTP/1.1 tells a client
// whether the upstream read a body it answered: one that answers without
// reading it (Python's http.server, a handler that returns early) takes
// the body's bytes for its next request, and that request's answer would
// be read on the pooled connection as the answer to whatever request came
// next, another worker's. Closing keeps every answer with its own request,
// and an upstream that honours Connection: close never reads the body as a
// request at all (fencegate doctor finds those that answer unread).
// KeepBodies lifts this for upstreams known to behave. HTTP/2 frames
// bodies itself: requests Std may send over HTTP/2 (its
// ForceAttemptHTTP2 set: an https upstream with upstream.tls) keep their
// connections, and an https upstream that falls back to HTTP/1.1 there
// does too.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	keep := t.KeepBodies && !(t.CloseShortcuts && (shortcutProne(req) || !lean(req)))
	if hasBody(req) && !req.Close && !keep && (req.URL.Scheme == "http" || !t.Std.ForceAttemptHTTP2) {
		r := *req
		r.Close = true
		req = &r
	}
	if !lean(req) {
		return t.Std.RoundTrip(req)
	}
	// As net/http's client: Request.Write drops a field whose name is not
	// a token and sends control bytes other than CR and LF in values.
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			closeBody(req)
			return nil, fmt.Errorf("upstream: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				closeBody(req)
				return nil, fmt.Errorf("upstream: invalid header field value for %q", k)
			}
		}
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	// Only reads are sent again (as net/http's isReplayable): a write the
	// upstream may have applied before the connection failed, sent again
	// later, could land after a newer token's write.
	replayable := (req.Body == nil || req.Body == http.NoBody) && (req.Method == http.MethodGet || req.Method == http.MethodHead)
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
		if reused && replayable && attempt == 0 && ctx.Err() == nil && !errors.Is(err, errResponseStarted) {
			// A pooled connection the server closed as it was taken.
			continue
		}
		closeBody(req)
		return nil, err
	}
}

// shortcutProne reports whether req carries a field servers commonly
// answer before reading the body: a precondition (any If-* field, in any
// case: WebDAV's If and CalDAV's If-Schedule-Tag-Match too) or an Expect.
func shortcutProne(req *http.Request) bool {
	for k := range req.Header {
		if len(k) >= 2 && k[0]|0x20 == 'i' && k[1]|0x20 == 'f' && (len(k) == 2 || k[2] == '-') || strings.EqualFold(k, "Expect") {
			return true
		}
	}
	return false
}

// hasBody reports whether req sends body bytes.
func hasBody(req *http.Request) bool {
	return req.Body != nil && req.Body != http.NoBody
}

// errResponseStarted marks a failure after some of the answer was read.
var errResponseStarted = errors.New("upstream: connection failed in the answer")

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
		if s := c.peek(); (t.idleTimeout == 0 || now.Sub(c.idled) < t.idleTimeout) && c.br.Buffered() == 0 && (s == connIdle || s == connUnknown) {
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
	c = &leanConn{t: t, addr: addr, conn: nc, peek: peekCheck(nc)}
	c.expire = func() { nc.SetDeadline(aLongTimeAgo) }
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(connReader{c})
	c.rleft = math.MaxInt64
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
	if t.sweep == nil && t.idleTimeout > 0 {
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

// inlineBody is the largest request body written by the caller's goroutine
// before it reads the answer: small enough to sit in the socket buffers
// whole, so the write cannot wait on an upstream that answered early and
// stopped reading. Larger bodies, bodies of unknown length and those
// waiting for 100 Continue are written by a goroutine of their own while
// the answer is read, as net/http's client does.
const inlineBody = 64 << 10

// roundTrip writes req on c and reads its answer. The answer's body hands c
// back to the pool when read to its end on a connection both sides keep
// open; anything else closes c.
func (c *leanConn) roundTrip(req *http.Request) (*http.Response, error) {
	// Cancelling the request unblocks whatever I/O is under way; the
	// connection is not reused after that.
	stop := context.AfterFunc(req.Context(), c.expire)
	fail := func(err error) (*http.Response, error) {
		stop()
		c.close()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	c.werr = nil
	body := req.Body != nil && req.Body != http.NoBody
	c.watch, c.writes = body && !req.Close, 0
	c.began.Store(false)
	c.early.Store(false)
	if !body || req.ContentLength > 0 && req.ContentLength <= inlineBody && len(req.Header["Expect"]) == 0 {
		c.inline = true
		werr := req.Write(c.bw)
		if werr == nil {
			werr = c.bw.Flush()
		}
		if werr != nil && c.werr == nil {
			// Reading the request body failed (the worker went away,
			// or sent more than allowed): the upstream waits for the
			// rest of a request that will not come.
			return fail(werr)
		}
		resp, err := c.readAnswer(req, false)
		if err != nil {
			if werr != nil {
				return fail(werr)
			}
			return fail(err)
		}
		// An answer to a request not sent whole (the upstream refused
		// it early and closed) is passed on; the connection is not kept.
		// Nor is it when the answer began before the request was sent
		// whole: the upstream answered without waiting for the body.
		return c.answer(req, resp, stop, werr == nil && !c.early.Load())
	}

	rb := &readErrBody{ReadCloser: req.Body, c: c}
	w := new(http.Request)
	*w = *req
	w.Body = rb
	var gate *continueGate
	if len(req.Header["Expect"]) > 0 {
		gate = &continueGate{rc: rb, proceed: make(chan bool, 1)}
		w.Body = gate
	}
	wdone, bw := make(chan error, 1), c.bw // the writer's own: close may detach it
	c.wdone = wdone
	c.inline = false
	go func() {
		err := w.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		// Request.Write wraps a body's read error in a type without
		// Unwrap, so a body the gate held back is told by the gate itself:
		// its answer is being read from this connection, which must stay
		// open for it (the answer's release closes it).
		if err != nil && c.werr == nil && (gate == nil || !gate.refused.Load()) {
			// The body failed: end the wait for an answer.
			c.conn.Close()
		}
		wdone <- err
	}()
	if gate != nil {
		// Request.Write flushes the head before it reads a body that
		// is not in memory; the go-ahead, a refusal or the timeout
		// decides whether the body follows. Other interim answers (103
		// Early Hints) are relayed and the wait goes on, to the same
		// deadline: no 100 Continue may ever come.
		deadline := time.Now().Add(expectContinueTimeout)
	wait:
		for interim := 0; ; interim++ {
			c.conn.SetReadDeadline(deadline)
			_, err := c.br.Peek(1)
			// Clearing the deadline may clear one a cancellation set:
			// the context is checked after it.
			c.conn.SetReadDeadline(time.Time{})
			var ne net.Error
			switch {
			case req.Context().Err() != nil:
				gate.decide(false)
				return fail(req.Context().Err())
			case errors.As(err, &ne) && ne.Timeout() && c.br.Buffered() == 0:
				c.began.Store(false) // an interim answer (103) is not the answer
				gate.decide(true)    // no answer yet: the body goes
				break wait
			case err != nil:
				gate.decide(false)
				return fail(err)
			case interim == maxInterim:
				gate.decide(false)
				return fail(errors.Join(errResponseStarted, errTooManyInterim))
			}
			resp, err := c.readAnswer(req, true)
			switch {
			case errors.Is(err, errOtherInterim):
				continue
			case err != nil:
				gate.decide(false)
				return fail(err)
			case resp != nil:
				// A final answer to the head: the body is not sent.
				gate.decide(false)
				return c.answer(req, resp, stop, false)
			}
			// 100 Continue: the body goes, and what is already buffered
			// after it is the final answer, begun before the body.
			c.began.Store(c.br.Buffered() > 0)
			gate.decide(true)
			break wait
		}
	}
	resp, err := c.readAnswer(req, false)
	if err != nil {
		if c.wdone != nil {
			if werr := <-c.wdone; werr != nil && c.werr == nil {
				c.wdone = nil
				if rb.err != nil {
					werr = rb.err
				}
				return fail(werr) // the body's error ended the wait
			}
			c.wdone = nil
		}
		return fail(err)
	}
	reuse := false
	select {
	case werr := <-c.wdone:
		c.wdone, reuse = nil, werr == nil && !c.early.Load()
	default:
		// Answered while the body is still going: the connection ends
		// with the answer.
	}
	return c.answer(req, resp, stop, reuse)
}

// readErrBody is a streamed request body that keeps its read error:
// Request.Write returns it wrapped in a type without Unwrap, and the
// gateway answers by the error itself (*http.MaxBytesError: 413; a client
// gone: no answer), as net/http's client hands it back.
type readErrBody struct {
	io.ReadCloser
	c   *leanConn // its werr tells write errors from read errors
	err error
}

func (b *readErrBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// WriteTo keeps the body's own copy (relay's large steps) where it has one.
func (b *readErrBody) WriteTo(w io.Writer) (int64, error) {
	wt, ok := b.ReadCloser.(io.WriterTo)
	if !ok {
		return io.Copy(w, struct{ io.Reader }{b})
	}
	n, err := wt.WriteTo(w)
	if err != nil && b.c.werr == nil {
		b.err = err
	}
	return n, err
}

// readAnswer reads the answer to req; expecting (a 100 Continue awaited),
// a 100 Continue returns (nil, nil). Interim answers go to the request's
// httptrace.ClientTrace.Got1xxResponse, as net/http's client hands them
// (ReverseProxy passes them on to its client: 103 Early Hints).
func (c *leanConn) readAnswer(req *http.Request, expecting bool) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	spell, _ := req.Context().Value(spellingKey{}).(*Spelling)
	for interim := 0; interim < maxInterim; interim++ {
		c.rleft = c.t.maxHead
		var rec *[]byte
		if spell != nil {
			// The head's bytes as they come, for the names' spelling:
			// those already buffered, then those read for it.
			rec = heads.Get().(*[]byte)
			b, _ := c.br.Peek(c.br.Buffered())
			*rec = append((*rec)[:0], b...)
			c.rec = rec
		}
		resp, err := http.ReadResponse(c.br, req)
		c.rleft = math.MaxInt64
		if rec != nil {
			c.rec = nil
			if err == nil && resp.StatusCode >= 200 {
				spell.learn(*rec)
			}
			if cap(*rec) <= 64<<10 {
				heads.Put(rec)
			}
		}
		if err != nil {
			if c.br.Buffered() > 0 || !isEOF(err) {
				err = errors.Join(errResponseStarted, err)
			}
			return nil, err
		}
		switch {
		case resp.StatusCode < 100:
			// ReadResponse takes any three digits; no such answer can be
			// relayed (net/http's servers refuse to write it).
			resp.Body.Close()
			return nil, errors.Join(errResponseStarted, errors.New("upstream: malformed status "+strconv.Quote(resp.Status)))
		case resp.StatusCode == http.StatusSwitchingProtocols:
			resp.Body.Close()
			return nil, errors.Join(errResponseStarted, errors.New("upstream: unexpected "+resp.Status))
		case resp.StatusCode >= 200:
			return resp, nil
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, errors.Join(errResponseStarted, err)
			}
		}
		if expecting {
			if resp.StatusCode == http.StatusContinue {
				return nil, nil
			}
			return nil, errOtherInterim
		}
	}
	return nil, errors.Join(errResponseStarted, errTooManyInterim)
}

// maxInterim is the number of interim answers read before a final one.
const maxInterim = 10

var (
	errTooManyInterim = errors.New("upstream: too many interim answers")
	// errOtherInterim is readAnswer's report, expecting a 100 Continue, of
	// another interim answer (relayed): the wait for the go-ahead goes on.
	errOtherInterim = errors.New("upstream: interim answer other than 100 Continue")
)

// answer hands resp on, its body releasing c. A connection that carried a
// body is kept only after a 2xx: nothing else proves the upstream read
// the body, and the refusals (304, 401, 403, 404, 412, redirects...) are
// what servers send from the head alone.
func (c *leanConn) answer(req *http.Request, resp *http.Response, stop func() bool, reuse bool) (*http.Response, error) {
	reuse = reuse && !resp.Close && !req.Close && (!hasBody(req) || resp.StatusCode/100 == 2)
	if resp.Body == http.NoBody {
		c.release(stop, reuse)
		return resp, nil
	}
	resp.Body = &leanBody{rc: resp.Body, c: c, stop: stop, reuse: reuse}
	return resp, nil
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset")
}

// expectContinueTimeout is how long a request with Expect: 100-continue
// waits for the go-ahead before its body is sent anyway (as net/http's
// client with the gateway's ExpectContinueTimeout).
const expectContinueTimeout = time.Second

// continueGate holds back a request body until roundTrip decides: sent
// after 100 Continue (or expectContinueTimeout without an answer), never
// read after a final answer to the head.
type continueGate struct {
	rc      io.ReadCloser
	proceed chan bool   // buffered: decide never waits
	decided bool        // roundTrip's
	refused atomic.Bool // decided against the body: its answer is being read
	opened  bool        // the writer's
	err     error
}

var errAnsweredEarly = errors.New("upstream answered before 100 Continue")

func (g *continueGate) decide(send bool) {
	if !g.decided {
		g.decided = true
		g.refused.Store(!send)
		g.proceed <- send
	}
}

func (g *continueGate) Read(p []byte) (int, error) {
	if !g.opened {
		g.opened = true
		if !<-g.proceed {
			g.err = errAnsweredEarly
		}
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.rc.Read(p)
}

func (g *continueGate) Close() error { return g.rc.Close() }

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

// StreamStep is the size of one copy step of a streamed request body.
const StreamStep = 256 << 10

var streamBuffers = sync.Pool{New: func() any { b := make([]byte, StreamStep); return &b }}

// StreamBuffer returns a pooled buffer of StreamStep bytes, for every
// upstream client copying bodies in the same steps; give it back with
// PutStreamBuffer.
func StreamBuffer() *[]byte { return streamBuffers.Get().(*[]byte) }

// PutStreamBuffer returns a buffer of StreamBuffer to the pool.
func PutStreamBuffer(b *[]byte) { streamBuffers.Put(b) }

// Spelling is the header names of an upstream's final answer as the
// upstream spelled them, where that differs from the canonical form
// http.Header keys take. The answer's Header keeps canonical keys (the
// gateway reads them with Get); a proxy writing the answer on takes the
// names from here, so an answer reaches its client as the upstream sent it
// (S3 clients such as boto3 keep x-amz-meta-* names as they come: a
// canonicalized name changes the user metadata a worker reads). Transport
// fills it for requests whose context carries it (WithSpelling); the
// requests it hands to its Std transport are not recorded.
type Spelling struct {
	// names holds, for each canonical key some line of which was spelled
	// otherwise, the spelling of each of its lines in order (one per value
	// of the Header's key); nil: every name was canonical.
	names map[string][]string
}

type spellingKey struct{}

// WithSpelling returns ctx asking Transport to record the spelling of the
// final answer's header names in s.
func WithSpelling(ctx context.Context, s *Spelling) context.Context {
	return context.WithValue(ctx, spellingKey{}, s)
}

// Names returns the name of each line of canonical header key k as the
// upstream spelled it, in the order of the key's values; nil if every line
// of k was spelled canonically (or s is nil).
func (s *Spelling) Names(k string) []string {
	if s == nil {
		return nil
	}
	return s.names[k]
}

// heads recycles the buffers that record answer heads.
var heads = sync.Pool{New: func() any { b := make([]byte, 0, ConnBufferSize); return &b }}

// learn records the spelling of the field names in head, an answer's
// status line and fields as received (ReadResponse parsed them: they are
// well formed up to the empty line). Most answers spell every name
// canonically: they are told so without an allocation.
func (s *Spelling) learn(head []byte) {
	s.names = nil
	odd := false
	eachName(head, func(name []byte) { odd = odd || !canonical(name) })
	if !odd {
		return
	}
	type line struct{ canon, name string }
	var lines []line // every field line
	eachName(head, func(name []byte) {
		lines = append(lines, line{textproto.CanonicalMIMEHeaderKey(string(name)), string(name)})
	})
	var spelled map[string]bool
	for _, l := range lines {
		if l.canon != l.name {
			if spelled == nil {
				spelled = make(map[string]bool)
			}
			spelled[l.canon] = true
		}
	}
	s.names = make(map[string][]string, len(spelled))
	for _, l := range lines {
		if spelled[l.canon] {
			s.names[l.canon] = append(s.names[l.canon], l.name)
		}
	}
}

// eachName calls fn with the name of each field line of head (after the
// status line, up to the empty line; continuations of folded lines and
// malformed names skipped).
func eachName(head []byte, fn func(name []byte)) {
	_, head, _ = bytes.Cut(head, []byte("\n")) // the status line
	for len(head) > 0 {
		var l []byte
		l, head, _ = bytes.Cut(head, []byte("\n"))
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) == 0 {
			break
		}
		if l[0] == ' ' || l[0] == '\t' {
			continue // a folded line's continuation
		}
		name, _, ok := bytes.Cut(l, []byte(":"))
		if !ok || !httpguts.ValidHeaderFieldName(string(name)) {
			continue
		}
		fn(name)
	}
}

// canonical reports whether textproto.CanonicalMIMEHeaderKey leaves name,
// a valid field name, as it is (its own quick check): the first letter
// and each after a hyphen upper case, the others lower.
func canonical(name []byte) bool {
	upper := true
	for _, c := range name {
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}
