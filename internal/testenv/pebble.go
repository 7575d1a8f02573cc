package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PebbleConfig sets the ports pebble's validation authority dials for
// challenges. Zero means a free port. Unless Validate is set, pebble runs
// with PEBBLE_VA_ALWAYS_VALID and marks every challenge valid without
// dialing, so the ports only matter to tests that inspect the configuration.
type PebbleConfig struct {
	HTTPPort int // HTTP-01 challenge port
	TLSPort  int // TLS-ALPN-01 challenge port
	// Validate makes pebble validate challenges for real: its VA dials the
	// domain at HTTPPort (HTTP-01) and TLSPort (TLS-ALPN-01), where the code
	// under test must answer. Use the domain "localhost": the system
	// resolver maps it to 127.0.0.1 from /etc/hosts, so nothing leaves the
	// machine.
	Validate bool
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
	// ListenerCAFile is a PEM file of TLSCertPEM: what a client (such as
	// fencegate's tls.acme.trusted_roots) must trust to talk to pebble.
	ListenerCAFile string

	proc *process
}

// Pebble starts pebble on 127.0.0.1 with a loopback-only config, no
// validation sleeps, every challenge valid (no DNS needed) unless
// cfg.Validate, and no random badNonce rejections, and stops it at the end
// of the test.
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
	s := &ACMEServer{TLSCertPEM: certPEM, HTTPPort: cfg.HTTPPort, TLSPort: cfg.TLSPort, ListenerCAFile: certFile}
	configFile := filepath.Join(dir, "pebble-config.json")
	env := []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"}
	if !cfg.Validate {
		env = append(env, "PEBBLE_VA_ALWAYS_VALID=1")
	}
	var ports []int
	s.proc, ports = startServer(t, "pebble", 2, env, bin,
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
			if cfg.Validate {
				// The system resolver: "localhost" from /etc/hosts.
				return []string{"-config", configFile}
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

// Stop ends pebble now (idempotent): afterwards every ACME request fails.
func (s *ACMEServer) Stop() { s.proc.stop(syscall.SIGKILL, 10*time.Second) }

// Log returns pebble's output so far.
func (s *ACMEServer) Log() string {
	b, _ := os.ReadFile(s.proc.log)
	return string(b)
}

// Orders counts the orders pebble logged (one line per new order), to
// prove a replica did not ask the CA again.
func (s *ACMEServer) Orders() int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s.Log()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "There are now") && strings.Contains(sc.Text(), "orders") {
			n++
		}
	}
	return n
}
