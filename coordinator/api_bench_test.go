package coordinator_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator"
)

// constBackend answers every call at once, so BenchmarkHandler measures the
// HTTP API's own cost (routing, JSON, validation) without a store.
type constBackend struct{}

func (constBackend) Acquire(_ context.Context, resource, owner string, ttl time.Duration) (coordinator.Lease, bool, error) {
	return coordinator.Lease{Resource: resource, Owner: owner, Token: 12345, ExpiresAt: time.Unix(1700000000, 123456000).UTC(), Remaining: ttl}, true, nil
}

func (constBackend) Renew(_ context.Context, resource, owner string, token int64, ttl time.Duration) (coordinator.Lease, error) {
	return coordinator.Lease{Resource: resource, Owner: owner, Token: token, ExpiresAt: time.Unix(1700000000, 123456000).UTC(), Remaining: ttl}, nil
}

func (constBackend) Release(context.Context, string, string, int64) (bool, error) { return true, nil }

func (constBackend) Lease(_ context.Context, resource string) (coordinator.Lease, error) {
	return coordinator.Lease{Resource: resource}, nil
}

// BenchmarkHandler: one call of each endpoint through Service.Handler()
// with a backend that does nothing (go test -bench Handler ./coordinator/).
func BenchmarkHandler(b *testing.B) {
	h := (&coordinator.Service{Backend: constBackend{}}).Handler()
	for _, c := range []struct{ name, path, body string }{
		{"acquire", "/v1/leases/acquire", `{"resource":"orders/1017","owner":"bench","ttl":"30s"}`},
		{"renew", "/v1/leases/renew", `{"resource":"orders/1017","owner":"bench","token":12345,"ttl":"30s"}`},
		{"release", "/v1/leases/release", `{"resource":"orders/1017","owner":"bench","token":12345}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", c.name, w.Code, w.Body)
				}
			}
		})
	}
}
