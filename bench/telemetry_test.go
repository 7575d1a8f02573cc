// Package bench holds fencegate's benchmarks. Figures are reported by the
// scripts beside them, never asserted by tests.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/telemetry"
)

// memStore is a Store in memory: the benchmark measures the request path,
// and a repeated token never reaches the store anyway.
type memStore struct {
	mu sync.Mutex
	m  map[string]fencegate.FenceState
}

func (s *memStore) LoadFence(ctx context.Context, r string) (fencegate.FenceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[r], nil
}

func (s *memStore) AdvanceFence(ctx context.Context, r string, token int64, owner string) (fencegate.FenceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[r]
	if token > st.Highest {
		st = fencegate.FenceState{Resource: r, Highest: token, Owner: owner}
		s.m[r] = st
	}
	return st, nil
}

// BenchmarkGatewayTelemetry serves fenced writes (a repeated token: the
// common case, no store I/O) through the gateway handler in process, to an
// httptest upstream over loopback, in three modes:
//
//	mode=none     no observer, no instrumentation at all
//	mode=off      telemetry as `serve` wires it with tracing off (the
//	              default): metrics, store wrapper, handler and transport
//	              hooks
//	mode=tracing  tracing on, exporting OTLP/HTTP to a loopback collector
//	              that discards what it receives
//
// Compare with benchstat -col /mode (scripts: bench/telemetry.sh).
func BenchmarkGatewayTelemetry(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	var exported atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exported.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	for _, mode := range []string{"none", "off", "tracing"} {
		b.Run("mode="+mode, func(b *testing.B) {
			h := newGateway(b, mode, upstream.URL, collector.URL)
			// Every worker goroutine writes its own resources, each with a
			// token admitted once before the timing starts.
			const resources = 64
			for i := range resources {
				serve(b, h, fmt.Sprintf("/orders/%d", i), http.StatusNoContent)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1) % resources
					serve(b, h, fmt.Sprintf("/orders/%d", i), http.StatusNoContent)
				}
			})
			// CPU time of the whole process (gateway, upstream, exporter
			// and collector) per request: on a shared machine it is far
			// steadier than wall time, and with the CPUs saturated it is
			// what bounds throughput.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Logf("exported %d bytes of OTLP", exported.Load())
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func serve(b *testing.B, h http.Handler, path string, want int) {
	req := httptest.NewRequest(http.MethodPut, path, strings.NewReader("payload"))
	req.Header.Set("Fencing-Token", "7")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		b.Fatalf("PUT %s: %d %s", path, w.Code, w.Body)
	}
}

func newGateway(b *testing.B, mode, upstream, collector string) http.Handler {
	b.Helper()
	route := gateway.RouteOptions{
		Name: "orders", PathPrefix: "/orders/", Resource: "{path}",
		FencedMethods: []string{"PUT", "POST", "PATCH", "DELETE"},
	}
	store := &memStore{m: make(map[string]fencegate.FenceState)}
	if mode == "none" {
		fence := gateway.NewLocalFence(store, gateway.LocalFenceOptions{})
		gw := gateway.New(fence, gateway.Options{})
		up, err := relay.New(relay.Options{URL: upstream})
		if err != nil {
			b.Fatal(err)
		}
		rt, err := gateway.NewRoute(route, up)
		if err != nil {
			b.Fatal(err)
		}
		gw.SetRoutes([]*gateway.Route{rt})
		return gw
	}
	var tc telemetry.Options
	if mode == "tracing" {
		tc.OTLPEndpoint = collector
	}
	tel, err := telemetry.New(context.Background(), tc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tel.Close() })
	// The same wiring as server.New and server.Start.
	fence := gateway.NewLocalFence(tel.Store(store), gateway.LocalFenceOptions{OnDrain: tel.Drained})
	gw := gateway.New(tel.TraceFence(fence), gateway.Options{})
	up, err := relay.New(relay.Options{
		URL:       upstream,
		Transport: telemetry.Transport(relay.NewTransport(nil), route.Name),
	})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := gateway.NewRoute(route, up)
	if err != nil {
		b.Fatal(err)
	}
	gw.SetRoutes([]*gateway.Route{rt})
	gw.Observer = tel
	return tel.InstrumentHandler("gateway", gw)
}
