package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PebbleConfig sets the ports pebble's validation authority dials for
// challenges. Zero means a free port. With PEBBLE_VA_ALWAYS_VALID (always set
// here) pebble marks every challenge valid without dialing, so these only
// matter to tests that inspect the configuration.
type PebbleConfig struct {
	HTTPPort int // HTTP-01 challenge port
	TLSPort  int // TLS-ALPN-01 challenge port
}

// ACMEServer is a running pebble ACME test CA.
type ACMEServer struct {
	// DirectoryURL is the ACME directory, https://127.0.0.1:PORT/dir.
	DirectoryURL string
	// ManagementURL is pebble's management API, https://127.0.0.1:PORT.
	ManagementURL string
	// TLSCertPEM is the self-signed certificate the ACME and management
	// listeners serve; clients must trust it (see HTTPClient).
	TLSCertPEM []byte
	// RootPEM is the root CA certificate that signs issued certificates,
	// fetched from /roots/0. Pebble makes a new one at every start.
	RootPEM           []byte
	HTTPPort, TLSPort int
}

// Pebble starts pebble on 127.0.0.1 with a loopback-only config, no
// validation sleeps, every challenge valid (no DNS needed) and no random
// badNonce rejections, and stops it at the end of the test.
func Pebble(t testing.TB, cfg PebbleConfig) *ACMEServer {
	t.Helper()
	bin := tool(t, "pebble", "pebble")
	dir := t.TempDir()
	certPEM, keyPEM, err := selfSigned()
	if err != nil {
		t.Fatalf("testenv: pebble certificate: %v", err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = FreePort(t)
	}
	if cfg.TLSPort == 0 {
		cfg.TLSPort = FreePort(t)
	}
	s := &ACMEServer{TLSCertPEM: certPEM, HTTPPort: cfg.HTTPPort, TLSPort: cfg.TLSPort}
	configFile := filepath.Join(dir, "pebble-config.json")
	env := []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_WFE_NONCEREJECT=0"}
	_, ports := startServer(t, "pebble", 2, env, bin,
		func(p []int) []string {
			var c struct {
				Pebble map[string]any `json:"pebble"`
			}
			c.Pebble = map[string]any{
				"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", p[0]),
				"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", p[1]),
				"certificate":                    certFile,
				"privateKey":                     keyFile,
				"httpPort":                       cfg.HTTPPort,
				"tlsPort":                        cfg.TLSPort,
				"ocspResponderURL":               "",
				"externalAccountBindingRequired": false,
				"retryAfter":                     map[string]int{"authz": 1, "order": 1},
				"keyAlgorithm":                   "ecdsa",
				"profiles": map[string]any{
					"default": map[string]any{"description": "default", "validityPeriod": 7776000},
				},
			}
			b, _ := json.MarshalIndent(c, "", "  ")
			if err := os.WriteFile(configFile, b, 0o644); err != nil {
				t.Fatal(err)
			}
			// The DNS resolver is never used with PEBBLE_VA_ALWAYS_VALID;
			// point it at loopback so nothing leaves the machine anyway.
			return []string{"-config", configFile, "-dnsserver", fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
		},
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("https://127.0.0.1:%d/dir", ports[0]), 30*time.Second, p.done)
		})
	s.DirectoryURL = fmt.Sprintf("https://127.0.0.1:%d/dir", ports[0])
	s.ManagementURL = fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	resp, err := s.HTTPClient().Get(s.ManagementURL + "/roots/0")
	if err != nil {
		t.Fatalf("testenv: pebble root CA: %v", err)
	}
	defer resp.Body.Close()
	s.RootPEM, err = io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: pebble root CA: %s %v", resp.Status, err)
	}
	return s
}

// HTTPClient returns a client that trusts the ACME server's TLS certificate.
func (s *ACMEServer) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.TLSCertPEM)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}
