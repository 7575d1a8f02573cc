package workerserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one client connection on the fast path.
type conn struct {
	srv    *Server
	nc     net.Conn
	remote string
	ctx    context.Context // the server's base context, with the local address
	idle   atomic.Bool     // between requests (Shutdown closes idle connections)

	br *bufio.Reader // reads nc through connReader
	bw *bufio.Writer // writes nc through connWriter
	// werr is the first write error; the request's context is cancelled
	// with it, as net/http does.
	werr   error
	cancel context.CancelFunc // the current request's

	lastMethod string
	pend       [2048]byte // an answer's first bytes, until its framing is known

	// The client-gone watch (see armWatch).
	watchMu  sync.Mutex
	watchEnd *sync.Cond
	armed    bool // the current request's body is read: the watch may start
	watching bool // a watch is reading nc
	gone     bool // the watch saw the client close or fail
	hasByte  bool // the watch read the next request's first byte
	byteBuf  [1]byte
	timer    *time.Timer
}

// watchDelay is how long a request runs, once its body is read, before
// its connection is watched for the client going away (which cancels the
// request's context, as net/http's server does at once). Most requests end
// sooner, and then cost no read, goroutine or deadline change for it.
const watchDelay = 5 * time.Millisecond

// aLongTimeAgo makes blocked reads return at once.
var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) serve() {
	var handoff net.Conn
	defer func() {
		if c.br != nil {
			c.br.Reset(nil)
			readers.Put(c.br)
		}
		if c.bw != nil {
			c.bw.Reset(nil)
			writers.Put(c.bw)
		}
		c.srv.forget(c, handoff)
	}()
	c.ctx = context.WithValue(c.srv.base, http.LocalAddrContextKey, c.nc.LocalAddr())
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(connReader{c})
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(connWriter{c})
	c.watchEnd = sync.NewCond(&c.watchMu)
	f := c.srv.fallback
	idleTimeout := f.IdleTimeout
	if idleTimeout == 0 {
		// net/http would fall back to ReadTimeout, which the fallback
		// may not have: it would wait without limit. Fail safe instead.
		idleTimeout = f.ReadHeaderTimeout
	}
	headLimit := f.MaxHeaderBytes
	if headLimit <= 0 {
		headLimit = defaultMaxHeaderBytes
	}
	headLimit = min(headLimit, readBufferSize)

	// A new connection's first head must be whole within the read-header
	// timeout from the start, as net/http has it: a client that connects
	// and sends nothing holds its connection no longer than that.
	headDeadline := false
	if d := f.ReadHeaderTimeout; d > 0 {
		c.nc.SetReadDeadline(time.Now().Add(d))
		headDeadline = true
	}
	for served := false; ; served = true {
		if c.br.Buffered() == 0 && !c.hasByte {
			c.idle.Store(true)
			if c.srv.shutdown.Load() {
				c.nc.Close()
				return
			}
			if idleTimeout > 0 && !headDeadline {
				c.nc.SetReadDeadline(time.Now().Add(idleTimeout))
			}
			if _, err := c.br.Peek(1); err != nil {
				c.nc.Close()
				return
			}
			c.idle.Store(false)
		}
		if served {
			// net/http waits, under the idle timeout, for four bytes of
			// the next request before it reads it, and closes without an
			// answer if they do not come. The client-gone watch may hold
			// the first of them.
			if c.br.Buffered() < 4 {
				if idleTimeout > 0 {
					c.nc.SetReadDeadline(time.Now().Add(idleTimeout))
				}
				if _, err := c.br.Peek(4); err != nil {
					c.nc.Close()
					return
				}
			}
			if c.lastMethod == http.MethodPost {
				// RFC 9112 §2.2 tolerance for clients that end a POST
				// body with an extra CRLF, as net/http has it: among
				// those four bytes.
				peek, _ := c.br.Peek(4)
				c.br.Discard(leadingCRorLF(peek))
			}
		}
		head, err := c.readHead(headLimit, headDeadline)
		headDeadline = false
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || c.br.Buffered() == 0 {
				c.nc.Close() // net/http answers none either
				return
			}
			// A head cut short: net/http answers it (400).
			handoff = c.handOff()
			return
		}
		var req *http.Request
		if head != nil {
			req = parse(head)
		}
		if req == nil || !fastShape(req, head, c.srv.maxFields()) {
			handoff = c.handOff()
			return
		}
		c.br.Discard(len(head))
		c.nc.SetReadDeadline(time.Time{}) // bodies stream without a deadline
		c.lastMethod = req.Method
		if !c.serveRequest(req) {
			return
		}
	}
}

// readHead returns the next request's head, waiting for more bytes under
// the read-header timeout (from now, unless deadline says one is set); nil
// if it is not for the fast path (larger than limit, even when whole in
// the buffer, or with bare LF line ends: net/http's to judge).
func (c *conn) readHead(limit int, deadline bool) ([]byte, error) {
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		switch end := headEnd(buf); {
		case end > limit:
			// Larger than MaxHeaderBytes: net/http's to refuse (431) or
			// to serve within its slack.
			return nil, nil
		case end > 0:
			return buf[:end], nil
		case end < 0:
			return nil, nil
		}
		if len(buf) >= limit {
			return nil, nil
		}
		if !deadline && c.srv.fallback.ReadHeaderTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.srv.fallback.ReadHeaderTimeout))
			deadline = true
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// headEnd is the length of the request head at the start of b, up to and
// including the empty line that ends it; 0 if b holds no whole head, -1 if
// a line ends in a bare LF.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		if j == 0 || b[i+j-1] != '\r' {
			return -1
		}
		i += j + 1
		if j == 1 {
			return i
		}
	}
}

func leadingCRorLF(b []byte) int {
	n := 0
	for _, c := range b {
		if c != '\r' && c != '\n' {
			break
		}
		n++
	}
	return n
}

// headReader is what parse reads a head from: a buffered reader over
// its bytes, pooled (ReadRequest wants a bufio.Reader; the connection's
// own must keep the head's bytes unread until the fast path takes it).
type headReader struct {
	br *bufio.Reader
	r  bytes.Reader
}

var headReaders = sync.Pool{New: func() any { return &headReader{br: bufio.NewReaderSize(nil, readBufferSize)} }}

// parse parses a request head with net/http's own parser; nil if it
// refuses it (net/http answers it then, on the handed-off connection).
func parse(head []byte) *http.Request {
	hr := headReaders.Get().(*headReader)
	hr.r.Reset(head)
	hr.br.Reset(&hr.r)
	req, err := http.ReadRequest(hr.br)
	hr.r.Reset(nil)
	hr.br.Reset(nil)
	headReaders.Put(hr)
	if err != nil {
		return nil
	}
	return req
}

// handOff gives the connection to the fallback server, with what was read
// of it and not served.
func (c *conn) handOff() net.Conn {
	n := c.br.Buffered()
	rest, _ := c.br.Peek(n)
	var buf []byte
	if c.hasByte {
		buf = append(buf, c.byteBuf[0])
	}
	buf = append(buf, rest...)
	c.br.Reset(nil)
	readers.Put(c.br)
	c.br = nil
	c.nc.SetReadDeadline(time.Time{})
	return &replayConn{Conn: c.nc, buf: buf}
}

// serveRequest runs the handler for req and finishes its answer. It
// reports whether the connection carries another request.
func (c *conn) serveRequest(req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	c.cancel = cancel
	defer cancel()
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote
	b := &body{c: c, left: req.ContentLength}
	if chunked(req) {
		b.chunks = httputil.NewChunkedReader(c.br)
		b.req = req
	}
	if req.ContentLength == 0 {
		req.Body = http.NoBody
		c.armWatch()
	} else {
		req.Body = b
	}
	w := &response{c: c, req: req, body: b, header: make(http.Header), clen: -1}
	w.closeAfter = req.Close

	if !c.runHandler(w, req) {
		c.stopWatch()
		c.bw.Flush() // what the handler wrote before it aborted, as net/http
		c.nc.Close()
		return false
	}
	w.finish()
	c.stopWatch()
	if c.gone || c.werr != nil {
		c.nc.Close()
		return false
	}
	if w.closeAfter || c.srv.shutdown.Load() {
		if !b.consumed() {
			c.closeWriteAndWait()
		}
		c.nc.Close()
		return false
	}
	return true
}

// runHandler calls the handler, and reports false if it panicked (logged
// unless it was http.ErrAbortHandler, as net/http does).
func (c *conn) runHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if err := recover(); err != nil {
			if err != http.ErrAbortHandler {
				const size = 64 << 10
				buf := make([]byte, size)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logf("http: panic serving %v: %v\n%s", c.remote, err, buf)
			}
			ok = false
		}
	}()
	c.srv.handler.ServeHTTP(w, req)
	return true
}

// closeWriteAndWait is net/http's: half-close, and wait a little before
// closing, so the reset a close with unread bytes sends does not destroy
// the answer before the client read it.
func (c *conn) closeWriteAndWait() {
	c.bw.Flush()
	if tcp, ok := c.nc.(interface{ CloseWrite() error }); ok {
		tcp.CloseWrite()
	}
	time.Sleep(rstAvoidanceDelay)
}

// armWatch is called once the request's body is read (by whichever
// goroutine reads it): after watchDelay the connection is read in the
// background, and the request's context is cancelled if the client closed
// it (a client that gave up on a write waiting for a drain must not have
// it forwarded after all). A byte read is the next pipelined request's
// and is kept.
func (c *conn) armWatch() {
	if c.br.Buffered() > 0 {
		return // the next request is already here: the client is not gone
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	c.armed = true
	if c.timer == nil {
		c.timer = time.AfterFunc(watchDelay, c.watch)
	} else {
		c.timer.Reset(watchDelay)
	}
}

func (c *conn) watch() {
	c.watchMu.Lock()
	if !c.armed || c.watching || c.hasByte {
		c.watchMu.Unlock()
		return
	}
	c.watching = true
	cancel := c.cancel
	c.watchMu.Unlock()
	n, err := c.nc.Read(c.byteBuf[:])
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	c.watching = false
	c.watchEnd.Broadcast()
	if n == 1 {
		c.hasByte = true
		return
	}
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		c.gone = true
		cancel()
	}
}

// stopWatch ends the request's watch: a read in progress is cut by an
// expired deadline.
func (c *conn) stopWatch() {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.armed = false
	if !c.watching {
		return
	}
	c.nc.SetReadDeadline(aLongTimeAgo)
	for c.watching {
		c.watchEnd.Wait()
	}
	c.nc.SetReadDeadline(time.Time{})
}

// connReader is what c.br reads: the byte the watch read first.
type connReader struct{ c *conn }

func (r connReader) Read(p []byte) (int, error) {
	if r.c.hasByte && len(p) > 0 {
		p[0] = r.c.byteBuf[0]
		r.c.hasByte = false
		return 1, nil
	}
	return r.c.nc.Read(p)
}

// connWriter is what c.bw writes; a failed write cancels the request, as
// net/http's checkConnErrorWriter does.
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	if err != nil && w.c.werr == nil {
		w.c.werr = err
		if w.c.cancel != nil {
			w.c.cancel()
		}
	}
	return n, err
}

// body is a request body read from the connection: of known length, or
// chunked.
type body struct {
	mu   sync.Mutex
	c    *conn
	left int64 // bytes left; -1 while a chunked body has not ended
	// chunks is net/http's chunk decoder over c.br for a chunked body
	// (nil for one of known length); req gets its trailer.
	chunks io.Reader
	req    *http.Request
	closed bool
	err    error // sticky: the connection is unusable after it
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (int, error) {
	switch {
	case b.closed:
		return 0, http.ErrBodyReadAfterClose
	case b.err != nil:
		return 0, b.err
	case b.left == 0:
		return 0, io.EOF
	case b.chunks != nil:
		return b.readChunks(p)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		b.c.armWatch()
		return n, io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// readChunks reads a chunked body, and its trailer after the last chunk,
// as net/http's server does: a bad trailer closes the body (later reads
// get http.ErrBodyReadAfterClose) and the connection after the answer.
func (b *body) readChunks(p []byte) (int, error) {
	n, err := b.chunks.Read(p)
	switch {
	case err == io.EOF:
		if err = readTrailer(b.c.br, b.req, b.c.srv.maxFields()); err != nil {
			b.err, b.closed = err, true
			return n, err
		}
		b.left = 0
		b.c.armWatch()
		return n, io.EOF
	case err != nil:
		b.err = err // the decoder's errors are sticky too
	}
	return n, err
}

func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// consumed reports whether the body was read whole.
func (b *body) consumed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left == 0 && b.err == nil
}

// discard reads what is left of a body, if less than
// maxPostHandlerReadBytes (a chunked one: up to that), so the connection
// can carry the next request, as net/http does; false if the connection
// must close instead.
func (b *body) discard() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.left == 0:
		return b.err == nil
	case b.chunks != nil:
		// net/http reads one byte more than it allows: a chunked body
		// with that much left, or a bad one, closes the connection.
		if b.closed || b.err != nil {
			return false
		}
		_, err := io.CopyN(io.Discard, lockedBody{b}, maxPostHandlerReadBytes+1)
		return err == io.EOF
	case b.err == io.ErrUnexpectedEOF:
		// The client ended its side: net/http counts the body as read
		// and closes when the next request's read finds the end.
		return true
	case b.err != nil, b.closed, b.left >= maxPostHandlerReadBytes:
		// net/http closes at the limit itself too.
		return false
	}
	n, err := b.c.br.Discard(int(b.left))
	b.left -= int64(n)
	if err != nil {
		b.err = err
		return false
	}
	b.c.armWatch()
	return true
}

// lockedBody reads a body whose lock the caller holds.
type lockedBody struct{ b *body }

func (l lockedBody) Read(p []byte) (int, error) { return l.b.readLocked(p) }

var (
	doubleCRLF = []byte("\r\n\r\n")
	// errTrailerEOF and errFieldsTooLarge are net/http's and textproto's
	// errors (their text is what a handler may pass on).
	errTrailerEOF     = errors.New("http: unexpected EOF reading trailer")
	errTrailerTooLong = errors.New("http: suspiciously long trailer after chunked body")
	errFieldsTooLarge = errors.New("message too large")
)

// maxTrailerBytes is net/http's server's limit on a trailer: its read
// buffer (the trailer must end within one Peek of it).
const maxTrailerBytes = 4096

// readTrailer reads the trailer after a chunked body's last chunk from
// br into req.Trailer, as net/http's body.readTrailer does in its server:
// none if the next line is empty; else the trailer must end within
// maxTrailerBytes and hold at most maxFields fields, parsed by textproto.
func readTrailer(br *bufio.Reader, req *http.Request, maxFields int) error {
	buf, err := br.Peek(2)
	if bytes.Equal(buf, crlf) {
		br.Discard(2)
		return nil
	}
	if len(buf) < 2 {
		return errTrailerEOF
	}
	if err != nil {
		return err
	}
	// buf is reassigned, not shadowed: a Peek that refills br slides the
	// buffered bytes to its start, so only the last Peek's slice shows
	// the trailer (TestTrailerReadAtBufferEnd).
	end := 0
	for size := 4; size <= maxTrailerBytes; size++ {
		var perr error
		if buf, perr = br.Peek(size); bytes.HasSuffix(buf, doubleCRLF) {
			end = size
			break
		}
		if perr != nil {
			break
		}
	}
	if end == 0 {
		return errTrailerTooLong
	}
	// textproto's ReadMIMEHeader counts no fields (net/http's server
	// passes its limit to the same parser): a trailer with more is
	// parsed up to the first field too many, for the error net/http
	// would meet first.
	src := br
	if cut := fieldsEnd(buf[:end], maxFields); cut > 0 {
		head, _ := br.Peek(cut)
		src = bufio.NewReader(io.MultiReader(bytes.NewReader(head), bytes.NewReader(crlf)))
	}
	hdr, err := textproto.NewReader(src).ReadMIMEHeader()
	switch {
	case err == io.EOF:
		return errTrailerEOF
	case err != nil:
		return err
	case src != br:
		return errFieldsTooLarge
	}
	if req.Trailer == nil {
		req.Trailer = make(http.Header, len(hdr))
	}
	for k, vv := range hdr {
		req.Trailer[k] = vv
	}
	return nil
}

// fieldsEnd is, for a trailer with more than max fields, the length of
// its lines up to and including field max+1 (with its folded lines); 0
// if it has at most max. Lines end as textproto reads them (LF, with or
// without a CR before it).
func fieldsEnd(trailer []byte, max int) int {
	fields := 0
	for i := 0; i < len(trailer); {
		j := bytes.IndexByte(trailer[i:], '\n')
		if j < 0 {
			return 0
		}
		line := bytes.TrimSuffix(trailer[i:i+j], []byte("\r"))
		field := len(line) > 0 && (i == 0 || line[0] != ' ' && line[0] != '\t')
		if fields > max && (len(line) == 0 || field) {
			return i
		}
		if len(line) == 0 {
			return 0
		}
		if field {
			fields++
		}
		i += j + 1
	}
	return 0
}
