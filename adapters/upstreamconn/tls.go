package upstreamconn

import (
	"crypto/tls"
	"fmt"

	"github.com/fencegate/fencegate/internal/certpool"
)

// TLSOptions configure the TLS client towards an https upstream.
type TLSOptions struct {
	// CAFile is a PEM bundle of roots to verify the upstream with. Empty:
	// the system roots.
	CAFile string
	// ServerName overrides the name verified in the upstream's certificate
	// (and sent as SNI). Empty: the URL's host.
	ServerName string
	// CertFile and KeyFile are the gateway's client certificate for mutual
	// TLS. Both or neither.
	CertFile string
	KeyFile  string
}

// TLSConfig is the TLS client configuration for an https upstream:
// roots from ca_file (else the system's), the name to verify (server_name,
// else the URL's host), and the gateway's client certificate for mutual
// TLS. Files are read now; a reload (SIGHUP) reads them again.
func TLSConfig(c TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := certpool.Load(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls.ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
