package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

// selfSigned returns a PEM certificate and key valid for 127.0.0.1, ::1 and
// localhost, for servers that insist on TLS (pebble).
func selfSigned() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "fencegate testenv"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// testPKI is a CA made for one test and the certificates it issued, as
// files: a server certificate for 127.0.0.1, ::1 and localhost, and a
// client certificate with common name "fencegate".
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(dir string) (*testPKI, error) {
	caKey, caCert, caPEM, err := newCA("fencegate testenv CA")
	if err != nil {
		return nil, err
	}
	p := &testPKI{ca: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(p.ca, caPEM, 0o600); err != nil {
		return nil, err
	}
	issue := func(name string, usage x509.ExtKeyUsage, cn string) (certFile, keyFile string, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return "", "", err
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			return "", "", err
		}
		return certFile, keyFile, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	}
	if p.serverCert, p.serverKey, err = issue("server", x509.ExtKeyUsageServerAuth, "localhost"); err != nil {
		return nil, err
	}
	if p.clientCert, p.clientKey, err = issue("client", x509.ExtKeyUsageClientAuth, "fencegate"); err != nil {
		return nil, err
	}
	return p, nil
}

// newCA returns a self-signed CA's key, certificate and PEM.
func newCA(cn string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// OtherCA writes the certificate of a CA that signed nothing of this test
// (to check that a client trusting it refuses the server) and returns its
// file.
func OtherCA(t testing.TB) string {
	t.Helper()
	_, _, p, err := newCA("fencegate testenv other CA")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	f := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(f, p, 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return f
}
