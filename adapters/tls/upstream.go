package tlsconf

import (
	"crypto/tls"
	"fmt"

	"github.com/fencegate/fencegate/config"
)

// UpstreamConfig is the TLS client configuration for an https upstream:
// roots from ca_file (else the system's), the name to verify (server_name,
// else the URL's host), and the gateway's client certificate for mutual
// TLS. Files are read now; a reload (SIGHUP) reads them again.
func UpstreamConfig(c *config.UpstreamTLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := LoadPool(c.CAFile)
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
