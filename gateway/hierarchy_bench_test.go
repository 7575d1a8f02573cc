package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/gateway"
)

type nopUpstream struct{}

func (nopUpstream) Forward(w http.ResponseWriter, _ *http.Request, _ *gateway.Request) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// BenchmarkHierarchical is the cost of hierarchical keys on the common
// write: a PUT of one object with a repeated token, through the whole
// gateway (routing, token, keys, fence, a no-op upstream), on a route with
// hierarchical: false, the default (trees by method) and true (every write
// a tree write). The objects sit three levels below the route's prefix
// (/dav/u<N>/d/f<M>), 64 owners, 4096 objects.
func BenchmarkHierarchical(b *testing.B) {
	f, t := false, true
	for _, hier := range []*bool{&f, nil, &t} {
		name := "default"
		if hier != nil {
			name = fmt.Sprint(*hier)
		}
		b.Run("hierarchical="+name, func(b *testing.B) {
			rt, err := gateway.NewRoute(gateway.RouteOptions{
				Name: "dav", PathPrefix: "/dav/", Resource: "{path}", Hierarchical: hier,
			}, nopUpstream{})
			if err != nil {
				b.Fatal(err)
			}
			g := gateway.New(gateway.NewLocalFence(openStore(b), gateway.LocalFenceOptions{}),
				gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			g.SetRoutes([]*gateway.Route{rt})
			const n = 4096
			reqs := make([]*http.Request, n)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("PUT", fmt.Sprintf("/dav/u%d/d/f%d", i%64, i), nil)
				reqs[i].Header.Set("Fencing-Token", "7")
				w := httptest.NewRecorder()
				g.ServeHTTP(w, reqs[i])
				if w.Code != http.StatusNoContent {
					b.Fatalf("warm-up PUT: %d %s", w.Code, w.Body)
				}
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &codeWriter{h: make(http.Header)}
				for pb.Next() {
					w.code = 0
					g.ServeHTTP(w, reqs[next.Add(1)%n])
					if w.code != http.StatusNoContent {
						b.Errorf("PUT: %d", w.code)
						return
					}
				}
			})
		})
	}
}

// codeWriter keeps only the status, reusable across requests.
type codeWriter struct {
	h    http.Header
	code int
}

func (w *codeWriter) Header() http.Header         { return w.h }
func (w *codeWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *codeWriter) WriteHeader(code int)        { w.code = code }
