package server

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/config"
)

// Every listener has timeouts and a connection cap of its own, so that one
// listener's clients cannot take the file descriptors another needs: 20000
// trickled bodies at the admin port must not stop the gateway from
// accepting writes. Beyond its cap a listener stops accepting;
// further clients wait in the kernel's accept queue, which holds no file
// descriptor of this process.
//
// The gateway has no ReadTimeout and no WriteTimeout: its bodies stream
// (an S3 upload may take an hour) and a whole-request deadline would cut
// legitimate large writes. Its reads and forwards are bounded per route
// instead (upstream.timeout, drain_timeout, max_body_bytes), its headers by
// read_header_timeout and its idle keep-alive connections by idle_timeout.
// The operator listeners carry small JSON bodies and get all four.

// Timeouts of the operator listeners (admin, acme-http). The coordinator's
// write timeout follows its max_wait (an acquire may wait that long).
const (
	apiReadHeaderTimeout = config.DefaultReadHeaderTimeout
	apiReadTimeout       = 30 * time.Second
	apiWriteTimeout      = time.Minute
	apiIdleTimeout       = config.DefaultIdleTimeout
	acmeMaxConnections   = 128
	// fdReserve are descriptors kept for the store, upstream dials beyond
	// one per gateway connection, log files and the like.
	fdReserve = 256
)

// openFileLimit is the soft RLIMIT_NOFILE. The Go runtime raises the soft
// limit to the hard one at start (Go 1.19+), so this is the most the
// process can have open; 0 if unknown.
func openFileLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}

// gatewayMaxConnections is gateway.max_connections, or by default what the
// open-file limit leaves after the operator listeners' caps and a reserve,
// halved: each gateway connection may hold an upstream connection too.
func gatewayMaxConnections(cfg *config.Config) int {
	if cfg.Gateway != nil && cfg.Gateway.MaxConnections > 0 {
		return cfg.Gateway.MaxConnections
	}
	limit := openFileLimit()
	if limit == 0 {
		return 0 // unknown: no cap of our own
	}
	left := limit - fdReserve
	if cfg.Admin.Listen != "" {
		left -= cfg.Admin.MaxConnections
	}
	if cfg.Coordinator.Enabled {
		left -= cfg.Coordinator.MaxConnections
	}
	if cfg.TLS.ACME != nil && cfg.TLS.ACME.HTTPListen != "" {
		left -= acmeMaxConnections
	}
	return max(64, left/2)
}

// apiServer is the http.Server of an operator listener.
func (s *Server) apiServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    config.DefaultMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// limitListener accepts at most n connections at once (n <= 0: no cap).
// Unlike golang.org/x/net/netutil.LimitListener it logs, once per minute,
// that the cap was reached: a full operator listener should be visible.
func limitListener(ln net.Listener, n int, name string, log *slog.Logger) net.Listener {
	if n <= 0 {
		return ln
	}
	return &capListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{}), name: name, log: log}
}

type capListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	name      string
	log       *slog.Logger
	mu        sync.Mutex
	lastWarn  time.Time
}

func (l *capListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	default:
		l.warnFull()
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &capConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *capListener) warnFull() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastWarn) < time.Minute {
		return
	}
	l.lastWarn = time.Now()
	l.log.Warn("listener at its connection cap; new clients wait in the accept queue", "listener", l.name, "max_connections", cap(l.sem))
}

func (l *capListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type capConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
