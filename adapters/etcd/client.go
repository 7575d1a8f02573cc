package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// reconnect is how the client redials a member that went away. gRPC's
// default grows to two minutes between dials, so a cluster back after a
// few seconds' outage would stay unused for seconds more while every write
// is refused; a dial to a down member costs one refused TCP connect, so a
// short ceiling is cheap.
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   500 * time.Millisecond,
	},
	MinConnectTimeout: 2 * time.Second,
}

// ClientOptions say how to reach and authenticate to an etcd cluster. The
// token source (New) and the etcd store build their clients from them with
// ClientConfig, so both speak to a cluster the same way.
type ClientOptions struct {
	// Endpoints are the cluster's client URLs; with TLS, all https://.
	Endpoints []string
	// Username and Password, if set, authenticate to a cluster with auth
	// enabled (etcd's own users; the token is refreshed by the client).
	Username, Password string
	// TLS, if non-nil, reaches the endpoints over TLS.
	TLS *TLS
	// DialTimeout bounds connecting and authenticating in clientv3.New.
	// Zero: 2s. Without a bound, New with a username waits for the cluster
	// for ever.
	DialTimeout time.Duration
}

// TLS is the client side of TLS to etcd (config.EtcdTLS).
type TLS struct {
	// CAFile holds the PEM CAs that sign the server certificates. Empty:
	// the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate for a cluster run
	// with --client-cert-auth; empty: none. They are read again at each
	// handshake, so a certificate renewed on disk (cert-manager) is used
	// from the next connection on without a restart.
	CertFile, KeyFile string
	// ServerName, if set, replaces the endpoint's host in the check of the
	// server's certificate.
	ServerName string
}

// ClientConfig returns the clientv3 configuration of o. It reads the TLS
// files once, so a missing or malformed file is an error here rather than
// a handshake that fails on every call. Errors name files, never their
// contents or the password.
func ClientConfig(o ClientOptions) (clientv3.Config, error) {
	if len(o.Endpoints) == 0 {
		return clientv3.Config{}, errors.New("etcd: no endpoints")
	}
	if (o.Username == "") != (o.Password == "") {
		return clientv3.Config{}, errors.New("etcd: set username and password together")
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	cfg := clientv3.Config{
		Endpoints:   o.Endpoints,
		Username:    o.Username,
		Password:    o.Password,
		DialTimeout: o.DialTimeout,
		// The client's own retries log at warn on every failed attempt;
		// refusals, /readyz and doctor report the outage instead.
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(reconnect)},
	}
	if o.TLS != nil {
		tc, err := tlsConfig(o.TLS)
		if err != nil {
			return clientv3.Config{}, err
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

func tlsConfig(t *TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("etcd tls: set cert_file and key_file together")
	}
	if t.CertFile != "" {
		load := func() (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("etcd tls cert_file %s, key_file %s: %w", t.CertFile, t.KeyFile, err)
			}
			return &c, nil
		}
		if _, err := load(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return load() }
	}
	return tc, nil
}

// Explain adds to err, a failure to reach the cluster of cfg, what a TLS
// handshake with each endpoint finds wrong: gRPC retries a failed
// handshake until the deadline and reports only "context deadline
// exceeded", which does not tell a wrong CA from a cluster that is down.
// Without TLS, or when every handshake succeeds, err is returned as it is.
func Explain(ctx context.Context, cfg clientv3.Config, err error) error {
	if err == nil || cfg.TLS == nil {
		return err
	}
	// Bounded as a whole: /readyz asks while the cluster may be blackholed.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, ep := range cfg.Endpoints {
		if _, perr := ProbeTLS(ctx, ep, cfg.TLS); perr != nil {
			return fmt.Errorf("%w (%v)", err, perr)
		}
	}
	return err
}

// ProbeTLS makes a TLS connection to endpoint as the client of tc would
// and returns the connection's state, or what fails: the handshake (the
// server's certificate), or the server's refusal of the client's
// certificate, which TLS 1.3 reports only after the handshake, on the
// first read.
func ProbeTLS(ctx context.Context, endpoint string, tc *tls.Config) (tls.ConnectionState, error) {
	var none tls.ConnectionState
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return none, fmt.Errorf("etcd endpoint %q: not a URL", endpoint)
	}
	tc = tc.Clone()
	tc.NextProtos = []string{"h2"} // what gRPC offers; etcd's server requires it
	if tc.ServerName == "" {
		tc.ServerName = u.Hostname()
	}
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: tc}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return none, fmt.Errorf("etcd %s: TLS: %w", u.Host, err)
	}
	defer c.Close()
	conn := c.(*tls.Conn)
	// The server speaks first after the handshake (HTTP/2 settings), or
	// sends its alert on a certificate it refuses.
	dl := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetReadDeadline(dl)
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return none, fmt.Errorf("etcd %s: TLS: %w", u.Host, err)
	}
	return conn.ConnectionState(), nil
}
