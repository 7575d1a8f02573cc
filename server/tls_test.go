package server_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/acmetest"
)

const filesYAML = `
store: {embedded: {path: $DIR/fg.db}}
admin: {listen: ""}
tls:
  mode: files
  cert_file: %s
  key_file: %s
  client_ca_file: %s
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: r
      match: {path_prefix: /}
      upstream: {url: $UPSTREAM}
      resource: "{path}"
      auth:
        client_certs:
          - {name: worker-c, prefixes: [/c/]}
`

// TestFilesTLS: the gateway serves the certificate from files, picks up a
// replaced certificate without a restart, and authenticates workers by
// client certificate.
func TestFilesTLS(t *testing.T) {
	up := &seen{}
	us := httptest.NewServer(up)
	defer us.Close()
	dir := t.TempDir()
	ca := acmetest.NewCA(t, "test CA")
	certFile, keyFile := ca.Issue(t, "gw", []string{"127.0.0.1"}, false).Write(t, dir, "tls")
	clientCA := filepath.Join(dir, "client-ca.pem")
	acmetest.WriteFile(t, clientCA, ca.PEM)
	s, _ := startEdge(t, fmt.Sprintf(filesYAML, certFile, keyFile, clientCA), us.URL)
	gw := "https://" + s.Addr("gateway")

	client := func(cert *tls.Certificate) *http.Client {
		tc := &tls.Config{RootCAs: acmetest.Pool(ca.PEM)}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	tok := map[string]string{"Fencing-Token": "1"}
	workerC := ca.Issue(t, "worker-c", nil, true).TLSCertificate(t)
	stranger := ca.Issue(t, "stranger", nil, true).TLSCertificate(t)
	otherCA := acmetest.NewCA(t, "other CA")
	forged := otherCA.Issue(t, "worker-c", nil, true).TLSCertificate(t)

	if a := do(t, client(&workerC), "PUT", gw+"/c/1", strings.NewReader("v"), tok); a.Status != 200 {
		t.Fatalf("worker-c over mTLS: %d %s", a.Status, a.Body)
	}
	if a := do(t, client(&workerC), "PUT", gw+"/d/1", strings.NewReader("v"), tok); a.Status != 403 {
		t.Fatalf("worker-c outside its prefix: %d %s; want 403", a.Status, a.Body)
	}
	if a := do(t, client(nil), "PUT", gw+"/c/1", strings.NewReader("v"), tok); a.Status != 401 {
		t.Fatalf("no client certificate: %d %s; want 401", a.Status, a.Body)
	}
	if a := do(t, client(&stranger), "PUT", gw+"/c/1", strings.NewReader("v"), tok); a.Status != 401 {
		t.Fatalf("unknown name: %d %s; want 401", a.Status, a.Body)
	}
	// Present the forged certificate whatever CAs the server asks for (a
	// Go client would otherwise withhold it).
	pushy := client(nil)
	pushy.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &forged, nil
	}
	req, _ := http.NewRequest("PUT", gw+"/c/1", strings.NewReader("v"))
	req.Header.Set("Fencing-Token", "1")
	if resp, err := pushy.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a certificate from another CA was accepted: %s", resp.Status)
	}
	if n := len(up.all()); n != 1 {
		t.Fatalf("upstream saw %d requests; want only worker-c's one", n)
	}

	served := func() string {
		conn, err := tls.Dial("tcp", s.Addr("gateway"), &tls.Config{RootCAs: acmetest.Pool(ca.PEM)})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := served()
	next := ca.Issue(t, "gw", []string{"127.0.0.1"}, false)
	next.Write(t, dir, "tls")
	// Make the change visible to the stat check even on coarse clocks.
	future := time.Now().Add(time.Minute)
	os.Chtimes(certFile, future, future)
	os.Chtimes(keyFile, future, future)
	deadline := time.Now().Add(15 * time.Second)
	for served() == first {
		if time.Now().After(deadline) {
			t.Fatalf("the replaced certificate was not picked up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := served(); got != next.Cert.SerialNumber.String() {
		t.Fatalf("serving serial %s; want the new %s", got, next.Cert.SerialNumber)
	}
}

const upstreamTLSYAML = `
store: {embedded: {path: $DIR/fg.db}}
admin: {listen: ""}
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: r
      match: {path_prefix: /}
      upstream:
        url: $UPSTREAM
        tls: {ca_file: %s, server_name: api.internal, cert_file: %s, key_file: %s}
      resource: "{path}"
`

// TestUpstreamMTLS: the gateway verifies the upstream against ca_file
// under server_name and presents its client certificate.
func TestUpstreamMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := acmetest.NewCA(t, "upstream CA")
	up := &seen{}
	us := httptest.NewUnstartedServer(up)
	srvCert := ca.Issue(t, "api.internal", []string{"api.internal"}, false).TLSCertificate(t)
	us.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: acmetest.Pool(ca.PEM)}
	us.StartTLS()
	defer us.Close()
	caFile := filepath.Join(dir, "ca.pem")
	acmetest.WriteFile(t, caFile, ca.PEM)
	certFile, keyFile := ca.Issue(t, "fencegate", nil, true).Write(t, dir, "client")
	s, _ := startEdge(t, fmt.Sprintf(upstreamTLSYAML, caFile, certFile, keyFile), us.URL)
	a := do(t, &http.Client{}, "PUT", "http://"+s.Addr("gateway")+"/x", strings.NewReader("v"), map[string]string{"Fencing-Token": "1"})
	if a.Status != 200 {
		t.Fatalf("write over mTLS upstream: %d %s", a.Status, a.Body)
	}
	got := up.all()
	if len(got) != 1 || got[0].Body != "v" {
		t.Fatalf("upstream saw %+v", got)
	}
}
