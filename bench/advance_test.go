package bench

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	httpup "github.com/fencegate/fencegate/adapters/http"
	"github.com/fencegate/fencegate/gateway"
)

// BenchmarkAdvance compares, through one gateway on the embedded store,
// writes with a repeated token to 64 resources (no store I/O) with writes
// to a new resource every time (each a durable advance: the fence record is
// fsynced before the write is forwarded, I3), 32 writers per core:
//
//	go test ./bench -run '^$' -bench Advance -benchtime 20000x -count 3
//
// Besides ns/op it reports writes/s, the store's commits/s and
// writes/commit (group commit: one commit, two fdatasyncs in bbolt, serves
// every advance queued while the previous one was on disk).
func BenchmarkAdvance(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok\n"))
	}))
	defer upstream.Close()
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
	var fresh atomic.Int64
	for _, tc := range []struct {
		name string
		path func(i int64) string
	}{
		{"repeated", func(i int64) string { return fmt.Sprintf("/orders/%d", i%resources) }},
		{"advance", func(int64) string { return fmt.Sprintf("/orders/new/%d", fresh.Add(1)) }},
	} {
		b.Run("write="+tc.name, func(b *testing.B) {
			var next atomic.Int64
			before := st.Stats()
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					do(b, gw, tc.path(next.Add(1)), "42", http.StatusOK)
				}
			})
			secs := time.Since(start).Seconds()
			after := st.Stats()
			commits := float64(after.Commits - before.Commits)
			b.ReportMetric(float64(b.N)/secs, "writes/s")
			b.ReportMetric(commits/secs, "commits/s")
			if commits > 0 {
				b.ReportMetric(float64(after.Changes-before.Changes)/commits, "writes/commit")
			}
		})
	}
}
