// Package acmetest is test PKI for the TLS and authentication tests: a CA
// that issues server and client certificates, and a Pebble ACME CA that
// validates challenges for real (testenv.Pebble marks every challenge
// valid without dialing, which would leave fencegate's HTTP-01 and
// TLS-ALPN-01 answers untested).
package acmetest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// CA is a throwaway certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	PEM     []byte // the CA certificate
	serial  int64
	serialM sync.Mutex
}

// NewCA returns a new CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der), serial: 1}
}

// Leaf is an issued certificate and its key, in PEM.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// Issue signs a certificate for cn with the given DNS names (IP literals
// become IP SANs). client makes it a client certificate, else a server one.
func (ca *CA) Issue(t testing.TB, cn string, names []string, client bool) Leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serialM.Lock()
	ca.serial++
	serial := ca.serial
	ca.serialM.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return Leaf{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", kb), Cert: cert}
}

// TLSCertificate is l as a tls.Certificate (for clients).
func (l Leaf) TLSCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Write writes the certificate and key into dir as name.crt and name.key
// and returns their paths.
func (l Leaf) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, l.CertPEM)
	WriteFile(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}

// WriteFile writes b to path (0600).
func WriteFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Pool is a cert pool holding the given PEM certificates.
func Pool(pems ...[]byte) *x509.CertPool {
	p := x509.NewCertPool()
	for _, b := range pems {
		p.AppendCertsFromPEM(b)
	}
	return p
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Pebble is a running Pebble ACME CA that validates challenges by dialing
// the domain at HTTPPort (HTTP-01) and TLSPort (TLS-ALPN-01). Use the
// domain "localhost": the system resolver maps it to 127.0.0.1 from
// /etc/hosts, so nothing leaves the machine.
type Pebble struct {
	DirectoryURL string
	// ListenerCAFile is the PEM file of the CA of Pebble's own HTTPS
	// listener: fencegate's tls.acme.trusted_roots.
	ListenerCAFile string
	// RootPEM is the root that signs issued certificates (new per start).
	RootPEM           []byte
	HTTPPort, TLSPort int

	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
	client *http.Client
}

// StartPebble starts Pebble on loopback with challenge ports httpPort and
// tlsPort (where the code under test must answer), skipping the test when
// the binary is missing (failing with CI=true).
func StartPebble(t testing.TB, httpPort, tlsPort int) *Pebble {
	t.Helper()
	bin, err := testenv.LookBinary("pebble")
	if err != nil {
		if testenv.CI() {
			t.Fatalf("pebble missing (run scripts/tools.sh pebble): %v", err)
		}
		t.Skipf("pebble missing (run scripts/tools.sh pebble): %v", err)
	}
	dir := t.TempDir()
	ca := NewCA(t, "pebble listener CA")
	leaf := ca.Issue(t, "127.0.0.1", []string{"127.0.0.1", "localhost"}, false)
	certFile, keyFile := leaf.Write(t, dir, "listener")
	p := &Pebble{HTTPPort: httpPort, TLSPort: tlsPort, ListenerCAFile: filepath.Join(dir, "listener-ca.pem")}
	WriteFile(t, p.ListenerCAFile, ca.PEM)
	p.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: Pool(ca.PEM)}}}

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		api, mgmt := testenv.FreePort(t), testenv.FreePort(t)
		cfg := map[string]any{"pebble": map[string]any{
			"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", api),
			"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", mgmt),
			"certificate":                    certFile,
			"privateKey":                     keyFile,
			"httpPort":                       httpPort,
			"tlsPort":                        tlsPort,
			"ocspResponderURL":               "",
			"externalAccountBindingRequired": false,
			"retryAfter":                     map[string]int{"authz": 1, "order": 1},
			"keyAlgorithm":                   "ecdsa",
			"profiles":                       map[string]any{"default": map[string]any{"description": "default", "validityPeriod": 7776000}},
		}}
		b, _ := json.Marshal(cfg)
		cfgFile := filepath.Join(dir, "pebble.json")
		WriteFile(t, cfgFile, b)
		p.log, err = os.Create(filepath.Join(dir, "pebble.log"))
		if err != nil {
			t.Fatal(err)
		}
		p.cmd = exec.Command(bin, "-config", cfgFile)
		// No validation shortcuts: the VA dials the challenge ports.
		p.cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
		p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p.done = make(chan struct{})
		go func(c *exec.Cmd, d chan struct{}) { c.Wait(); close(d) }(p.cmd, p.done)
		p.DirectoryURL = fmt.Sprintf("https://127.0.0.1:%d/dir", api)
		if lastErr = p.waitUp(); lastErr == nil {
			t.Cleanup(p.Stop)
			resp, err := p.client.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmt))
			if err != nil {
				t.Fatalf("pebble root: %v", err)
			}
			p.RootPEM, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			return p
		}
		p.Stop()
	}
	t.Fatalf("pebble did not start: %v\n%s", lastErr, p.Log())
	return nil
}

func (p *Pebble) waitUp() error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := p.client.Get(p.DirectoryURL)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("pebble exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends Pebble (idempotent): afterwards any ACME request fails.
func (p *Pebble) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.done
}

// Log returns Pebble's output.
func (p *Pebble) Log() string {
	b, _ := os.ReadFile(p.log.Name())
	return string(b)
}

// Orders counts the orders Pebble logged (one line per new order), to
// prove a replica did not ask the CA again.
func (p *Pebble) Orders() int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(p.Log()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "There are now") && strings.Contains(sc.Text(), "orders") {
			n++
		}
	}
	return n
}
