package listentls_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/listentls"
	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/acmetest"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replica is one gateway process's TLS side: a gateway listener on the
// CA's TLS-ALPN port and the HTTP listener on its HTTP-01 port.
type replica struct {
	m          *listentls.Manager
	https, web *http.Server
	addr       string
}

func startReplica(t *testing.T, c listentls.Options, dbURL string, httpsAddr, httpAddr string, h http.Handler) *replica {
	t.Helper()
	db, err := postgres.Open(context.Background(), dbURL, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c.Storage, c.Logger = postgres.NewCertStorage(db), quiet
	m, err := listentls.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ln, err := net.Listen("tcp", httpsAddr)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{m: m, addr: ln.Addr().String()}
	_, port, _ := net.SplitHostPort(r.addr)
	var p int
	fmt.Sscan(port, &p)
	m.SetTLSALPNPort(p)
	r.https = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go r.https.Serve(tls.NewListener(ln, m.ServerConfig()))
	t.Cleanup(func() { r.https.Close() })
	if httpAddr != "" {
		hl, err := net.Listen("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		r.web = &http.Server{Handler: m.HTTPHandler(p), ReadHeaderTimeout: 10 * time.Second}
		go r.web.Serve(hl)
		t.Cleanup(func() { r.web.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.ManageSync(ctx); err != nil {
		t.Fatalf("obtaining the certificate: %v", err)
	}
	return r
}

// fencedGateway is a real gateway (local fence over bbolt) in front of a
// recorder, on an orders route like the binary's.
func fencedGateway(t *testing.T, rec *recorder.Recorder) http.Handler {
	t.Helper()
	up := &http.Server{Handler: rec}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fg.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	gw := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: quiet})
	up2, err := relay.New(relay.Options{URL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "orders", PathPrefix: "/orders/", Resource: "{path}", ForwardToken: true}, up2)
	if err != nil {
		t.Fatal(err)
	}
	gw.SetRoutes([]*gateway.Route{rt})
	return gw
}

// TestACMEPebble obtains a certificate from a real ACME CA (Pebble, which
// validates the challenge by connecting back), once per challenge type,
// makes a fenced write over HTTPS with a client that trusts only Pebble's
// root, and then shows that a second replica on the same PostgreSQL serves
// the same certificate with the CA gone: it never asked the CA again.
func TestACMEPebble(t *testing.T) {
	for _, challenge := range []string{"http-01", "tls-alpn-01"} {
		t.Run(challenge, func(t *testing.T) {
			httpPort, tlsPort := testenv.FreePort(t), testenv.FreePort(t)
			ca := testenv.Pebble(t, testenv.PebbleConfig{HTTPPort: httpPort, TLSPort: tlsPort, Validate: true})
			dbURL := testenv.Postgres(t).URL
			c := listentls.Options{Mode: "acme", ACME: &listentls.ACME{
				Domains:      []string{"localhost"},
				Email:        "ops@example.com",
				CA:           ca.DirectoryURL,
				TrustedRoots: ca.ListenerCAFile,
				Challenges:   []string{challenge},
				HTTPListen:   fmt.Sprintf("127.0.0.1:%d", httpPort),
			}}
			rec := &recorder.Recorder{}
			a := startReplica(t, c, dbURL, fmt.Sprintf("127.0.0.1:%d", tlsPort), c.ACME.HTTPListen, fencedGateway(t, rec))

			client := &http.Client{Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: acmetest.Pool(ca.RootPEM)},
				// "localhost" must resolve to the loopback address the
				// replica listens on, whatever the resolver prefers.
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, network, a.addr)
				},
			}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			req, _ := http.NewRequest("PUT", fmt.Sprintf("https://localhost:%d/orders/7", tlsPort), strings.NewReader("paid"))
			req.Header.Set("Fencing-Token", "42")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("fenced write over HTTPS: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("fenced write: %s", resp.Status)
			}
			if h := rec.HistoryOf("/orders/7"); len(h) != 1 || h[0].Value != "paid" || h[0].Token != "42" {
				t.Fatalf("upstream history = %+v; want the one write", h)
			}
			leafA := resp.TLS.PeerCertificates[0]

			// Plain HTTP is redirected to HTTPS, method kept.
			hc := &http.Client{CheckRedirect: client.CheckRedirect}
			r2, err := hc.Post(fmt.Sprintf("http://127.0.0.1:%d/orders/7?x=1", httpPort), "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			r2.Body.Close()
			if want := fmt.Sprintf("https://127.0.0.1:%d/orders/7?x=1", tlsPort); r2.StatusCode != http.StatusPermanentRedirect || r2.Header.Get("Location") != want {
				t.Fatalf("http answer %s Location %q; want 308 to %s", r2.Status, r2.Header.Get("Location"), want)
			}

			if n := ca.Orders(); n != 1 {
				t.Fatalf("Pebble saw %d orders; want 1", n)
			}
			ca.Stop()

			// Replica B: own process state, same database, CA down.
			b := startReplica(t, c, dbURL, "127.0.0.1:0", "", http.NotFoundHandler())
			conn, err := tls.Dial("tcp", b.addr, &tls.Config{ServerName: "localhost", RootCAs: acmetest.Pool(ca.RootPEM)})
			if err != nil {
				t.Fatalf("replica B handshake: %v", err)
			}
			defer conn.Close()
			leafB := conn.ConnectionState().PeerCertificates[0]
			if !leafA.Equal(leafB) {
				t.Fatalf("replica B serves serial %s; want replica A's %s", leafB.SerialNumber, leafA.SerialNumber)
			}
		})
	}
}
