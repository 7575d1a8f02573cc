package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// storeLog is a reverse proxy in front of a store that records the
// requests it passes and the connections they came on.
type storeLog struct {
	mu    sync.Mutex
	reqs  []string // method, path and query, framing
	conns map[string]bool
}

func newStoreLog(t *testing.T, endpoint string) (*storeLog, string) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l := &storeLog{conns: map[string]bool{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, fmt.Sprintf("%s %s length=%d chunked=%v", r.Method, r.URL.RequestURI(), r.ContentLength, len(r.TransferEncoding) > 0))
		l.conns[r.RemoteAddr] = true
		l.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(px.Close)
	return l, px.URL
}

// An upload through the default GCS route (stamping) is one request to
// the store, as it is straight to the store: no precondition read, no
// probe, the stamp spliced into the same request. The uploads of one
// worker share one connection to the store (transport.go's KeepBodies:
// a connection per upload made the gateway's 4 KiB uploads take twice as
// long). BenchmarkUpload's figure rests on both.
func TestGCSUploadOneStoreRequest(t *testing.T) {
	srv := testenv.FakeGCS(t)
	srv.CreateBucket(t, gcsBucket)
	log, endpoint := newStoreLog(t, srv.Endpoint)
	p := startFencegate(t, s3GatewayYAML(gcsRouteYAML("objects", "", endpoint, "", "30s")))
	env := &gcsEnv{GCS: srv, Proc: p, GW: p.URL("gateway")}
	w := gcsWorker(t, env.GW, func() int64 { return 3 })
	const n = 4
	for i := range n {
		if err := gcsPut(w, fmt.Sprintf("one-%d", i), strings.Repeat("x", 4<<10), 0); err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	log.mu.Lock()
	reqs, conns := log.reqs, len(log.conns)
	log.mu.Unlock()
	if len(reqs) != n || conns != 1 {
		t.Fatalf("the store got %d requests on %d connections for %d uploads; want %d on 1:\n%s", len(reqs), conns, n, n, strings.Join(reqs, "\n"))
	}
	for i, r := range reqs {
		if !strings.HasPrefix(r, fmt.Sprintf("POST /upload/storage/v1/b/%s/o?", gcsBucket)) || !strings.Contains(r, "uploadType=multipart") || strings.Contains(r, "chunked=true") {
			t.Errorf("request %d to the store: %s; want one multipart upload sent with its length", i, r)
		}
	}
	for i := range n {
		if body, stamp := env.stored(t, fmt.Sprintf("one-%d", i)); len(body) != 4<<10 || stamp != "3" {
			t.Errorf("one-%d in the store: %d bytes, stamp %q; want 4096, 3", i, len(body), stamp)
		}
	}
}
