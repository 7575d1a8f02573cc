package bench

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
)

// BenchmarkPrecondition compares one HTTP route forwarding writes with a
// repeated token on the embedded store, with and without `precondition:
// etag`, against one upstream that honours If-Match / If-None-Match
// atomically and answers a strong ETag. With the precondition every write
// also loads the recorded ETag, marks it unknown before the forward and
// records the answer's; on the embedded store both are in memory once the
// object's record is durably unknown (adapters/bolt/etag.go), so neither
// waits for a disk:
//
//	go test ./bench -run '^$' -bench Precondition -benchtime 20000x -count 3
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

	for _, pre := range []string{"none", "etag"} {
		st, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		gw := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		opts := relay.Options{URL: upstream.URL, Route: "orders"}
		if pre == "etag" {
			opts.ETags = st
		}
		up, err := relay.New(opts)
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
		b.Run("precondition="+pre, func(b *testing.B) {
			// Each writer cycles through objects of its own: two concurrent
			// writes to one object with one token race on its ETag, and
			// the loser is refused precondition_failed, as it should be.
			var writers atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := writers.Add(1)
				for i := 0; pb.Next(); i++ {
					do(b, gw, fmt.Sprintf("/%s/%d/%d", pre, w, i%8), "42", http.StatusOK)
				}
			})
		})
	}
}
