package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/telemetry"
)

// BenchmarkRefusal serves stale writes (refused 409 by the fence, never
// forwarded) through the gateway handler in process, with the observer
// as serve wires it before and after the console's recent-refusals ring:
//
//	ring=off  telemetry only (metrics; tracing off)
//	ring=on   telemetry and the ring (server/console.go's observer)
//
// Compare with benchstat -col /ring:
//
//	go test -run '^$' -bench BenchmarkRefusal -count 10 ./bench/ > r.txt
//	.cache/bin/benchstat -col /ring r.txt
func BenchmarkRefusal(b *testing.B) {
	for _, ring := range []string{"off", "on"} {
		b.Run("ring="+ring, func(b *testing.B) {
			tel, err := telemetry.New(context.Background(), telemetry.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer tel.Close()
			store := &memStore{m: make(map[string]fencegate.FenceState)}
			fence := gateway.NewLocalFence(tel.Store(store), gateway.LocalFenceOptions{OnDrain: tel.Drained})
			gw := gateway.New(fence, gateway.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			up, err := relay.New(relay.Options{URL: "http://127.0.0.1:1"})
			if err != nil {
				b.Fatal(err)
			}
			rt, err := gateway.NewRoute(gateway.RouteOptions{
				Name: "orders", PathPrefix: "/orders/", Resource: "{path}",
				FencedMethods: []string{"PUT"},
			}, up)
			if err != nil {
				b.Fatal(err)
			}
			gw.SetRoutes([]*gateway.Route{rt})
			gw.Observer = tel
			if ring == "on" {
				gw.Observer = ringObserver{tel, telemetry.NewRefusals(0)}
			}
			const resources = 64
			for i := range resources {
				fence.Advance(context.Background(), fmt.Sprintf("/orders/%d", i), 9, "bench")
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1) % resources
					req := httptest.NewRequest(http.MethodPut, fmt.Sprintf("/orders/%d", i), strings.NewReader("x"))
					req.Header.Set("Fencing-Token", "7")
					w := httptest.NewRecorder()
					gw.ServeHTTP(w, req)
					if w.Code != http.StatusConflict {
						b.Fatalf("stale write answered %d", w.Code)
					}
				}
			})
		})
	}
}

// ringObserver is server/console.go's observer without the access log.
type ringObserver struct {
	tel  *telemetry.Telemetry
	ring *telemetry.Refusals
}

func (o ringObserver) Observe(ctx context.Context, out *gateway.Outcome) {
	o.tel.Observe(ctx, out)
	o.ring.Observe(ctx, out)
}
