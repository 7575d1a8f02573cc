package s3_test

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/gateway"
)

// The token sent as a trailer the request did not announce (net/http
// keeps every trailer field) never reaches the store: the gateway's
// trailer check sees only announced ones, and a DeleteObjects body, which
// the gateway reads whole, has filled the request's trailers by the time
// it is forwarded (chunked, as it came). The store reports the trailers
// it received.
func TestDeleteObjectsTokenTrailerNotForwarded(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %q", r.URL.RawQuery, r.Trailer))
		mu.Unlock()
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><DeleteResult><Deleted><Key>k</Key></Deleted></DeleteResult>`)
	}))
	t.Cleanup(up.Close)
	gw := workerGateway(t, up.URL, nil)

	body := `<Delete><Object><Key>k</Key></Object></Delete>`
	sum, md := sha256.Sum256([]byte(body)), md5.Sum([]byte(body))
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/bucket?delete=", nil)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("Content-Md5", base64.StdEncoding.EncodeToString(md[:]))
	req.Header.Set("Fencing-Token", "1")
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "worker", SecretAccessKey: "worker-secret"},
		req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", gw.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var raw strings.Builder
	fmt.Fprintf(&raw, "POST /bucket?delete= HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n", req.URL.Host)
	req.Header.Write(&raw)
	fmt.Fprintf(&raw, "\r\n%x\r\n%s\r\n0\r\nFencing-Token: 7\r\n\r\n", len(body), body)
	io.WriteString(c, raw.String())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != http.StatusOK || len(got) != 1 || strings.Contains(got[0], "Fencing-Token") {
		t.Fatalf("DeleteObjects with a token trailer: %d %s; the store received %q; want 200 and no token trailer", resp.StatusCode, b, got)
	}
}

// workerGateway is a gateway with one S3 route, {bucket}/{key}, to
// endpoint, for the worker's key "worker"/"worker-secret" (now: the
// route's clock; nil: time.Now).
func workerGateway(t *testing.T, endpoint string, now func() time.Time) *httptest.Server {
	t.Helper()
	u, err := s3.New(context.Background(), s3.Options{
		Spec:        objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: endpoint, Now: now},
		AccessKeyID: "gw", SecretAccessKey: "gw-secret",
		Clients: []s3.Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "objects", Resource: "{bucket}/{key}", Vars: func(n string) bool { return n == "bucket" || n == "key" }}, u)
	if err != nil {
		t.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	return gw
}
