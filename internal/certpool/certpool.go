// Package certpool reads PEM bundles of certificates: the client CAs of
// the gateway's listeners and the roots it verifies upstreams with.
package certpool

import (
	"crypto/x509"
	"fmt"
	"os"
)

// Load reads a PEM bundle of certificates.
func Load(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate found", file)
	}
	return pool, nil
}
