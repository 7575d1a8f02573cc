package bench

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/telemetry"
)

// BenchmarkDataplane is the hot path of bench/dataplane.sh in process: the
// gateway handler, wired as `fencegate serve` wires it (telemetry observer,
// embedded bbolt store), in front of a loopback upstream, with 512-byte
// PUTs. The front side is an http.Handler call, so allocs/op are the
// gateway's, its upstream adapter's and the transport's.
//
//	plain     a bare httputil.ReverseProxy (the baseline)
//	tuned     bench/cmd/tunedproxy's ReverseProxy: pooled buffers, large idle pool
//	repeated  a repeated token on one of 64 resources: no I/O in the fence
//	repeated-full  the same with the fence cache full (100,000 other
//	          resources cached, as after many advances)
//	advance   a new resource on every write: one durable advance each
//	          (bbolt group commit across the 32 concurrent writers)
//	stale     a token below the fence's: refused, never forwarded
//
// Profile with
//
//	go test -run '^$' -bench Dataplane -benchmem -cpuprofile cpu.out -memprofile mem.out ./bench/
func BenchmarkDataplane(b *testing.B) { benchDataplane(b) }

// BenchmarkProxy is BenchmarkDataplane's plain, repeated and stale: the
// fence's cost against a bare reverse proxy, in process (bench/proxy.sh
// measures the same over sockets with wrk).
func BenchmarkProxy(b *testing.B) { benchDataplane(b, "plain", "repeated", "stale") }

// BenchmarkAdvance is BenchmarkDataplane's repeated and advance: what a
// durable advance per write costs, with the store's commits/s and
// writes/commit (group commit: one bbolt commit, two fdatasyncs, serves
// every advance queued while the previous one was on disk):
//
//	go test ./bench -run '^$' -bench Advance -benchtime 20000x -count 3
func BenchmarkAdvance(b *testing.B) { benchDataplane(b, "repeated", "advance") }

// benchDataplane runs the targets named in only (all if none).
func benchDataplane(b *testing.B, only ...string) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok\n"))
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	plain := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: relay.NewTransport(nil),
	}
	// tuned is bench/cmd/tunedproxy: pooled 32 KiB buffers, a large idle
	// pool, a Rewrite that only sets the target.
	tuned := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = u.Scheme, u.Host },
		Transport: &http.Transport{
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096,
			WriteBufferSize: 32 << 10, ReadBufferSize: 32 << 10,
		},
		BufferPool: &bufferPool{},
	}

	tel, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Close()
	st, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	fence := gateway.NewLocalFence(tel.Store(st), gateway.LocalFenceOptions{OnDrain: tel.Drained})
	gw := gateway.New(fence, gateway.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	gw.Observer = tel
	up, err := relay.New(relay.Options{URL: upstream.URL})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "orders", PathPrefix: "/orders/", Resource: "{path}"}, up)
	if err != nil {
		b.Fatal(err)
	}
	gw.SetRoutes([]*gateway.Route{rt})
	const resources = 64
	for i := range resources {
		do(b, gw, "/orders/"+strconv.Itoa(i), "42", http.StatusOK)
	}
	body := strings.Repeat("x", 512)

	var fresh atomic.Int64
	var fill sync.Once
	for _, tc := range []struct {
		name  string
		h     http.Handler
		path  func(i int64) string
		token string
		want  int
	}{
		{"plain", plain, func(i int64) string { return "/orders/" + strconv.FormatInt(i%resources, 10) }, "42", http.StatusOK},
		{"tuned", tuned, func(i int64) string { return "/orders/" + strconv.FormatInt(i%resources, 10) }, "42", http.StatusOK},
		{"repeated", gw, func(i int64) string { return "/orders/" + strconv.FormatInt(i%resources, 10) }, "42", http.StatusOK},
		{"repeated-full", gw, func(i int64) string { return "/orders/" + strconv.FormatInt(i%resources, 10) }, "42", http.StatusOK},
		{"advance", gw, func(int64) string { return "/orders/new/" + strconv.FormatInt(fresh.Add(1), 10) }, "42", http.StatusOK},
		{"stale", gw, func(i int64) string { return "/orders/" + strconv.FormatInt(i%resources, 10) }, "41", http.StatusConflict},
	} {
		if len(only) > 0 && !slices.Contains(only, tc.name) {
			continue
		}
		b.Run(tc.name, func(b *testing.B) {
			if tc.name == "repeated-full" {
				fill.Do(func() { fillCache(b, fence) })
			}
			var next atomic.Int64
			b.SetParallelism(16) // 32 writers on 2 cores, as wrk -c32
			b.ReportAllocs()
			before := st.Stats()
			cpu0 := cpuTime(b)
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU()
			defer func() {
				secs := time.Since(start).Seconds()
				// CPU per write (the whole process: gateway, upstream and
				// load) varies less than ns/op when other work shares the
				// cores.
				b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
				after := st.Stats()
				commits := float64(after.Commits - before.Commits)
				b.ReportMetric(float64(b.N)/secs, "writes/s")
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
				b.ReportMetric(commits/secs, "commits/s")
				if commits > 0 {
					b.ReportMetric(float64(after.Changes-before.Changes)/commits, "writes/commit")
				}
				if syncs := float64(after.Syncs - before.Syncs); syncs > 0 {
					b.ReportMetric(syncs/secs, "fsyncs/s")
					b.ReportMetric(float64(after.Changes-before.Changes)/syncs, "writes/fsync")
				}
			}()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					path := tc.path(next.Add(1))
					req := httptest.NewRequest(http.MethodPut, path, strings.NewReader(body))
					req.Header.Set("Fencing-Token", tc.token)
					w := httptest.NewRecorder()
					tc.h.ServeHTTP(w, req)
					if w.Code != tc.want {
						b.Fatalf("PUT %s: %d %s", path, w.Code, w.Body)
					}
				}
			})
		})
	}
}

// bufferPool is tunedproxy's pool of 32 KiB copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v := b.p.Get(); v != nil {
		return *v.(*[]byte)
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// fillCache fills the fence's cache to its default bound with resources
// read from the store (token 0 on a resource without a record is admitted
// without an advance: no fsync per entry).
func fillCache(b *testing.B, f gateway.Fence) {
	for i := range 100000 {
		p, err := f.Admit(context.Background(), gateway.Write{Resource: "/fill/" + strconv.Itoa(i)})
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
