// Package workerserver serves workers' requests on the gateway's
// listeners: the plain HTTP/1.1 requests of the common shape itself, and hands every other connection to a net/http Server.
//
// The gateway's writes are small HTTP/1.1 requests with a Content-Length on
// keep-alive connections. For them net/http's server costs about a sixth
// of the gateway's CPU per write beyond the syscalls (docs/performance.md):
// a background read started and aborted per request, three or four
// deadline changes, a response with a buffered writer and a header clone.
// This server watches for the client going away only when a request runs
// long, changes deadlines twice, and writes an answer of known length
// straight into the connection's buffer.
//
// A chunked body (the Go GCS client sends its uploads so) is read by
// net/http's own chunk decoder (httputil.NewChunkedReader, the one its
// server uses) and its trailer as net/http's server reads it, into
// Request.Trailer, with the same limits (4 KiB, MaxHeaderValueCount
// fields) and errors.
//
// Everything else goes to net/http, which serves it in full: a
// connection's first request that is not of the shape (HTTP/1.0, a
// chunked body that also has a Content-Length or declares its trailers,
// Expect, Upgrade, HEAD, CONNECT, OPTIONS *, an absolute request target, a
// head larger than the read buffer or with more fields than net/http
// allows, any head net/http would refuse) hands the connection over at
// that request, with the bytes already read replayed first. From then on
// the connection is net/http's. So the fast path never answers a request
// differently from net/http in the ways clients depend on: the request is
// parsed by net/http's own ReadRequest, checked as its server checks it,
// and a request the fast path is unsure of is never answered by it.
package workerserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Server serves HTTP/1.1 on a listener with its fallback server's Handler,
// and hands the connections it does not serve to that server. The
// fallback's BaseContext, IdleTimeout, ReadHeaderTimeout, MaxHeaderBytes
// and ErrorLog apply to the fast path too. It must have no ReadTimeout or
// WriteTimeout and no TLS (the fast path is for plain TCP listeners that
// stream bodies without whole-request deadlines); New refuses one that has.
type Server struct {
	fallback *http.Server
	handler  http.Handler
	base     context.Context // Fallback's base context, built at Serve

	handoff  *handoffListener
	mu       sync.Mutex
	lns      []net.Listener // closed by Shutdown and Close
	conns    map[*conn]struct{}
	closing  bool
	shutdown atomic.Bool
	doneConn chan struct{} // signalled when a connection ends
}

// New returns a Server for fallback (see Server).
func New(fallback *http.Server) (*Server, error) {
	if fallback.ReadTimeout > 0 || fallback.WriteTimeout > 0 || fallback.TLSConfig != nil {
		return nil, errors.New("workerserver: the fallback server must have no ReadTimeout, WriteTimeout or TLSConfig")
	}
	return &Server{
		fallback: fallback,
		handler:  fallback.Handler,
		conns:    make(map[*conn]struct{}),
		doneConn: make(chan struct{}, 1),
	}, nil
}

// Serve accepts connections on ln until it is closed. Like
// http.Server.Serve it returns http.ErrServerClosed after Shutdown or
// Close.
func (s *Server) Serve(ln net.Listener) error {
	base := context.Background()
	if s.fallback.BaseContext != nil {
		base = s.fallback.BaseContext(ln)
	}
	s.base = context.WithValue(base, http.ServerContextKey, s.fallback)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.handoff = newHandoffListener(ln.Addr())
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	go s.fallback.Serve(s.handoff) // ends when the hand-off listener closes
	defer ln.Close()
	var delay time.Duration // as net/http: back off on temporary errors
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors, an aborted handshake: net/http backs
			// off and retries such errors too.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logf("workerserver: accept error: %v; retrying in %v", err, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := s.newConn(nc)
		if c == nil {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// Shutdown stops accepting, closes idle connections, and waits for the
// others to finish their request (both the fast path's and the
// fallback's) or for ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	h := s.stop(false)
	errc := make(chan error, 1)
	go func() { errc <- s.fallback.Shutdown(ctx) }()
	if h != nil {
		h.Close()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for s.closeConns(false) > 0 { // a busy connection may have gone idle
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.doneConn:
		case <-tick.C:
		}
	}
	return <-errc
}

// stop ends accepting and closes the idle connections (all of them if
// all); it returns the hand-off listener, if Serve made one.
func (s *Server) stop(all bool) *handoffListener {
	s.shutdown.Store(true)
	s.mu.Lock()
	s.closing = true
	for _, ln := range s.lns {
		ln.Close()
	}
	h := s.handoff
	s.mu.Unlock()
	s.closeConns(all)
	return h
}

// closeConns closes the idle connections (all if all) and returns how many
// the server still has.
func (s *Server) closeConns(all bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if all || c.idle.Load() {
			c.nc.Close()
		}
	}
	return len(s.conns)
}

// Close closes every connection at once, the fallback's too.
func (s *Server) Close() error {
	if h := s.stop(true); h != nil {
		h.Close()
	}
	return s.fallback.Close()
}

func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil
	}
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.idle.Store(true)
	s.conns[c] = struct{}{}
	return c
}

// forget removes c; hand-off is the connection to give to the fallback
// instead of closing it (nil: none).
func (s *Server) forget(c *conn, handoff net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	h := s.handoff
	closing := s.closing
	s.mu.Unlock()
	select {
	case s.doneConn <- struct{}{}:
	default:
	}
	if handoff != nil {
		if closing || !h.give(handoff) {
			handoff.Close()
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.fallback.ErrorLog != nil {
		s.fallback.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// Defaults of net/http's server, for the same settings left zero.
const (
	defaultMaxHeaderBytes = http.DefaultMaxHeaderBytes
	// readBufferSize is the connection's read buffer: a request head that
	// does not fit is handed to net/http (which has its own limit).
	readBufferSize  = 8 << 10
	writeBufferSize = 4 << 10
	// maxPostHandlerReadBytes is net/http's: an unread request body up to
	// this size is read and dropped after the answer so the connection
	// can carry the next request; a larger one closes the connection.
	maxPostHandlerReadBytes = 256 << 10
	// rstAvoidanceDelay is net/http's wait between half-closing a
	// connection with unread request bytes and closing it, so the client
	// reads the answer before the reset that closing sends.
	rstAvoidanceDelay = 500 * time.Millisecond
)

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}
)

// handoffListener is the fallback server's listener: connections the fast
// path gives up.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// replayConn is a handed-off connection: the bytes the fast path read
// but did not serve come first.
type replayConn struct {
	net.Conn
	buf []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite keeps net/http's half-close before a reset-avoiding wait.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// fastShape reports whether the fast path serves req, parsed from head:
// HTTP/1.1, a request target in origin form with a valid Host (ReadRequest
// refuses two, and took it from the header: the target has none), a body
// of known length, none, or chunked (alone: without a Content-Length,
// which ReadRequest drops, and without declared trailers), no more header
// fields than maxFields, and nothing that asks for a protocol step of
// net/http's (100-continue, upgrades, HEAD's bodiless answers, OPTIONS *,
// CONNECT). The header checks are net/http's server's own.
func fastShape(req *http.Request, head []byte, maxFields int) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 ||
		req.Method == http.MethodHead || req.Method == http.MethodConnect || req.RequestURI == "*" ||
		req.URL.Host != "" || req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	// net/http counts the head's fields (ReadRequest alone does not):
	// more lines than that, folded or not, are its to judge.
	if bytes.Count(head, crlf)-2 > maxFields {
		return false
	}
	if chunked(req) {
		if req.Trailer != nil || hasField(head, "content-length") {
			return false
		}
	} else if len(req.TransferEncoding) > 0 || req.ContentLength < 0 {
		return false
	}
	for k, vv := range req.Header {
		switch k {
		case "Expect", "Upgrade", "Trailer", "Http2-Settings":
			return false
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// chunked reports whether req's body is chunked (ReadRequest takes no
// other transfer coding).
func chunked(req *http.Request) bool {
	return len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "chunked"
}

// hasField reports whether head has a field named name (lower case) at
// the start of a line.
func hasField(head []byte, name string) bool {
	for line := range bytes.SplitSeq(head, crlf) {
		if len(line) > len(name) && line[len(name)] == ':' && bytes.EqualFold(line[:len(name)], []byte(name)) {
			return true
		}
	}
	return false
}

// maxFields is the fallback's limit on a request head's (or trailer's)
// fields.
func (s *Server) maxFields() int {
	if n := s.fallback.MaxHeaderValueCount; n > 0 {
		return n
	}
	return http.DefaultMaxHeaderValueCount
}
