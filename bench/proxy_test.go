package bench

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/adapters/bolt"
	httpup "github.com/fencegate/fencegate/adapters/http"
	"github.com/fencegate/fencegate/gateway"
)

// BenchmarkProxy compares, in one process and against one upstream, a bare
// httputil.ReverseProxy with the gateway forwarding writes with a repeated
// token on the embedded store, and the gateway refusing a stale token. The
// front side is an http.Handler call, so the figures isolate the proxies'
// own cost; bench/proxy.sh measures the same over real sockets with wrk.
func BenchmarkProxy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok\n"))
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	plain := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: httpup.NewTransport(nil),
	}

	st, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	gw := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	up, err := httpup.New(httpup.Options{URL: upstream.URL})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := gateway.NewRoute(gateway.RouteOptions{
		Name: "orders", PathPrefix: "/orders/", Resource: "{path}",
		FencedMethods: []string{"PUT", "POST", "PATCH", "DELETE"},
	}, up)
	if err != nil {
		b.Fatal(err)
	}
	gw.SetRoutes([]*gateway.Route{rt})
	const resources = 64
	for i := range resources {
		do(b, gw, fmt.Sprintf("/orders/%d", i), "42", http.StatusOK)
	}

	for _, tc := range []struct {
		name  string
		h     http.Handler
		token string
		want  int
	}{
		{"plain", plain, "42", http.StatusOK},
		{"fenced", gw, "42", http.StatusOK},
		{"stale", gw, "41", http.StatusConflict},
	} {
		b.Run("proxy="+tc.name, func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					do(b, tc.h, fmt.Sprintf("/orders/%d", next.Add(1)%resources), tc.token, tc.want)
				}
			})
		})
	}
}

func do(b *testing.B, h http.Handler, path, token string, want int) {
	req := httptest.NewRequest(http.MethodPut, path, strings.NewReader(`{"status":"shipped"}`))
	req.Header.Set("Fencing-Token", token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		b.Fatalf("PUT %s: %d %s", path, w.Code, w.Body)
	}
}
