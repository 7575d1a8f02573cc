// Package listentls gives fencegate's own listeners (workers, admin,
// coordinator) their TLS certificates: from files
// that are picked up again when they change (mode files), or obtained and
// renewed through ACME by certmagic (mode acme), with certificates and ACME
// locks in a certmagic.Storage that replicas share (PostgreSQL, see
// adapters/postgres.CertStorage). The TLS clients of upstreams are
// upstreamconn's (TLSConfig).
package listentls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/fencegate/fencegate/internal/certpool"
)

// Manager holds the listeners' TLS configuration for one process.
type Manager struct {
	tls *tls.Config // nil when tls.mode is off

	// ACME only.
	magic   *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	domains []string
	cancel  context.CancelFunc
}

// Options configure New.
type Options struct {
	// Mode is off (or empty: no TLS), files or acme.
	Mode string
	// CertFile and KeyFile are the certificate of mode files; they are
	// read again when they change.
	CertFile string
	KeyFile  string
	// ACME configures mode acme.
	ACME *ACME
	// ClientCAFile, if set, asks clients for a certificate and verifies
	// it against these roots.
	ClientCAFile string
	// Storage keeps ACME certificates, account keys and locks. Nil means
	// files under DataDir, which replicas can share only through a shared
	// file system; pass PostgreSQL storage when the store is PostgreSQL.
	Storage certmagic.Storage
	// DataDir is the directory of the file storage when Storage is nil.
	DataDir string
	// Logger receives certmagic's log lines. Nil: slog.Default().
	Logger *slog.Logger
}

// ACME configures certificates obtained through ACME.
type ACME struct {
	// Domains get certificates (at least one).
	Domains []string
	// Email is the ACME account's contact.
	Email string
	// CA is the ACME directory URL. Empty: Let's Encrypt production.
	CA string
	// TrustedRoots, if set, is a PEM bundle of roots to verify the CA with.
	TrustedRoots string
	// Challenges enabled: http-01, tls-alpn-01.
	Challenges []string
	// HTTPListen is the address whose port answers HTTP-01 challenges.
	HTTPListen string
}

// New prepares the listeners' TLS. Files mode loads the certificate now (a
// bad pair fails the start); ACME mode obtains nothing until Manage. Mode
// off returns a Manager whose ServerConfig is nil.
func New(opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{}
	switch opts.Mode {
	case "", "off":
		return m, nil
	case "files":
		fc, err := NewFileCertificate(opts.CertFile, opts.KeyFile, opts.Logger)
		if err != nil {
			return nil, err
		}
		m.tls = &tls.Config{GetCertificate: fc.GetCertificate}
	case "acme":
		if err := m.setupACME(&opts); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("tls.mode %q: must be off, files or acme", opts.Mode)
	}
	m.tls.MinVersion = tls.VersionTLS12
	m.tls.NextProtos = append([]string{"h2", "http/1.1"}, m.tls.NextProtos...)
	if opts.ClientCAFile != "" {
		pool, err := certpool.Load(opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.client_ca_file: %w", err)
		}
		// Certificates are optional at the handshake so that routes without
		// client_certs (and API keys) keep working on the same listener;
		// routes that require one refuse with 401.
		m.tls.ClientAuth = tls.VerifyClientCertIfGiven
		m.tls.ClientCAs = pool
	}
	return m, nil
}

func (m *Manager) setupACME(opts *Options) error {
	a := opts.ACME
	if a == nil || len(a.Domains) == 0 {
		return errors.New("tls.mode acme needs tls.acme.domains")
	}
	storage := opts.Storage
	if storage == nil {
		storage = &certmagic.FileStorage{Path: opts.DataDir}
	}
	logger := zapLogger(opts.Logger)
	var magic *certmagic.Config
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           logger,
	})
	magic = certmagic.New(m.cache, certmagic.Config{Storage: storage, Logger: logger})
	tmpl := certmagic.ACMEIssuer{
		CA:                      a.CA,
		Email:                   a.Email,
		Agreed:                  true,
		DisableHTTPChallenge:    !slices.Contains(a.Challenges, "http-01"),
		DisableTLSALPNChallenge: !slices.Contains(a.Challenges, "tls-alpn-01"),
		Logger:                  logger,
	}
	if tmpl.CA == "" {
		tmpl.CA = certmagic.LetsEncryptProductionCA
	}
	if a.TrustedRoots != "" {
		pool, err := certpool.Load(a.TrustedRoots)
		if err != nil {
			return fmt.Errorf("tls.acme.trusted_roots: %w", err)
		}
		tmpl.TrustedRoots = pool
	}
	// The challenge listeners are ours (the http_listen and gateway
	// listeners); certmagic finds their ports taken and answers through
	// HTTPHandler and the TLS config instead of listening itself.
	if port := portOf(a.HTTPListen); port > 0 {
		tmpl.AltHTTPPort = port
	}
	m.issuer = certmagic.NewACMEIssuer(magic, tmpl)
	magic.Issuers = []certmagic.Issuer{m.issuer}
	m.magic, m.domains = magic, slices.Clone(a.Domains)
	m.tls = magic.TLSConfig()
	return nil
}

// SetTLSALPNPort tells certmagic which port the gateway listener bound, so
// that a TLS-ALPN-01 challenge is answered there (the CA always connects to
// port 443; with a port forward in front, the bound port differs).
func (m *Manager) SetTLSALPNPort(port int) {
	if m.issuer != nil {
		m.issuer.AltTLSALPNPort = port
	}
}

// ServerConfig is the listeners' TLS configuration, nil when TLS is off.
// Each caller gets its own copy.
func (m *Manager) ServerConfig() *tls.Config {
	if m.tls == nil {
		return nil
	}
	return m.tls.Clone()
}

// HTTPHandler serves the plain-HTTP listener of ACME mode: HTTP-01
// challenges (also those started by another replica, through the shared
// storage), and a permanent redirect to HTTPS for everything else. Nil
// outside ACME mode.
func (m *Manager) HTTPHandler(httpsPort int) http.Handler {
	if m.issuer == nil {
		return nil
	}
	return m.issuer.HTTPChallengeHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if httpsPort != 0 && httpsPort != 443 {
			host = net.JoinHostPort(host, strconv.Itoa(httpsPort))
		}
		// 308 keeps the method and body: a redirected PUT stays a PUT.
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	}))
}

// Manage starts obtaining and renewing the ACME certificates in the
// background, retrying with backoff; certificates already in storage are
// loaded without asking the CA. Call it once the listeners serve (the CA
// connects back to them). No-op outside ACME mode.
func (m *Manager) Manage(ctx context.Context) error {
	if m.magic == nil {
		return nil
	}
	ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return m.magic.ManageAsync(ctx, m.domains)
}

// ManageSync is Manage that returns once every certificate is loaded or
// obtained (or the first failure).
func (m *Manager) ManageSync(ctx context.Context) error {
	if m.magic == nil {
		return nil
	}
	return m.magic.ManageSync(ctx, m.domains)
}

// Close stops renewals and certmagic's maintenance goroutines.
func (m *Manager) Close() error {
	if m.cancel != nil {
		m.cancel()
	}
	if m.cache != nil {
		m.cache.Stop()
	}
	return nil
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// FileCertificate serves a certificate and key from files and picks them up
// again when either file changes (a renewal by cert-manager, certbot or a
// mounted Secret's update), without a restart.
type FileCertificate struct {
	certFile, keyFile string
	log               *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	stamp    [2]fileStamp
	checked  time.Time
	interval time.Duration
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewFileCertificate loads the pair; an unreadable or mismatched pair is an
// error at start.
func NewFileCertificate(certFile, keyFile string, log *slog.Logger) (*FileCertificate, error) {
	f := &FileCertificate{certFile: certFile, keyFile: keyFile, log: log, interval: time.Second}
	st, err := f.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	f.cert, f.stamp, f.checked = &cert, st, time.Now()
	return f, nil
}

func (f *FileCertificate) stat() ([2]fileStamp, error) {
	var st [2]fileStamp
	for i, name := range []string{f.certFile, f.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return st, fmt.Errorf("tls certificate: %w", err)
		}
		st[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return st, nil
}

// GetCertificate implements tls.Config.GetCertificate. At most once a
// second it stats both files (two syscalls, no reads) and reloads the pair
// when either changed. A pair that fails to load (say the certificate was
// replaced and the key not yet) keeps the previous one serving and is
// retried at the next check.
func (f *FileCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if now.Sub(f.checked) < f.interval {
		return f.cert, nil
	}
	f.checked = now
	st, err := f.stat()
	if err != nil {
		f.log.Warn("tls certificate files unreadable; serving the loaded certificate", "err", err)
		return f.cert, nil
	}
	if st == f.stamp {
		return f.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		f.log.Warn("tls certificate changed but does not load; serving the previous one", "err", err)
		return f.cert, nil
	}
	f.cert, f.stamp = &cert, st
	f.log.Info("tls certificate reloaded", "cert_file", f.certFile)
	return f.cert, nil
}
