package bench

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	httpup "github.com/fencegate/fencegate/adapters/http"
	"github.com/fencegate/fencegate/gateway"
)

// BenchmarkPrecondition compares one HTTP route forwarding writes with a
// repeated token on the embedded store, with and without `precondition:
// etag`, against one upstream that honours If-Match / If-None-Match
// atomically and answers a strong ETag. With the precondition every write
// also loads the recorded ETag, marks it unknown (write-ahead, a durable
// bolt write) and records the answer's (a second durable write):
//
//	go test ./bench -run '^$' -bench Precondition -benchtime 2000x
//
// BENCH_BOLT_BATCH_DELAY=10us shortens bbolt's group-commit wait (default
// 1ms), to tell the wait from the fsync.
func BenchmarkPrecondition(b *testing.B) {
	var (
		mu    sync.Mutex
		etags = map[string]string{}
		n     atomic.Int64
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		cur, ok := etags[r.URL.Path]
		if im := r.Header.Get("If-Match"); (im != "" && im != `"`+cur+`"`) || (r.Header.Get("If-None-Match") == "*" && ok) {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		e := strconv.FormatInt(n.Add(1), 16)
		etags[r.URL.Path] = e
		w.Header().Set("ETag", `"`+e+`"`)
		w.Write([]byte("ok\n"))
	}))
	defer upstream.Close()

	delay, _ := time.ParseDuration(os.Getenv("BENCH_BOLT_BATCH_DELAY")) // 0: the store's default (1ms)
	for _, pre := range []string{"none", "etag"} {
		st, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{BatchDelay: delay})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		gw := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		opts := httpup.Options{URL: upstream.URL, Route: "orders"}
		if pre == "etag" {
			opts.ETags = st
		}
		up, err := httpup.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		rt, err := gateway.NewRoute(gateway.RouteOptions{
			Name: "orders", PathPrefix: "/" + pre + "/", Resource: "{path}",
			FencedMethods: []string{"PUT", "POST", "PATCH", "DELETE"},
		}, up)
		if err != nil {
			b.Fatal(err)
		}
		gw.SetRoutes([]*gateway.Route{rt})
		const resources = 64
		for i := range resources {
			do(b, gw, fmt.Sprintf("/%s/%d", pre, i), "42", http.StatusOK)
		}
		b.Run("precondition="+pre, func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					do(b, gw, fmt.Sprintf("/%s/%d", pre, next.Add(1)%resources), "42", http.StatusOK)
				}
			})
		})
	}
}
