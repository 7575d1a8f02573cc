package gateway

import (
	"net/http"
	"testing"
)

func TestAliasOf(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"X_tenant", "X-Tenant", true},
		{"X-TENANT", "X-Tenant", true},
		{"X-Tenant", "X-Tenant", true},
		{"X-Tenants", "X-Tenant", false},
		{"X.Tenant", "X-Tenant", false},
		{"Fencing_token", "Fencing-Token", true},
	} {
		if got := aliasOf(tt.a, tt.b); got != tt.want {
			t.Errorf("aliasOf(%q, %q) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// BenchmarkRequestShape is the per-request cost of the shape checks on a
// typical fenced write (eight headers, a template header).
func BenchmarkRequestShape(b *testing.B) {
	r, _ := http.NewRequest("PUT", "http://gw/orders/7", nil)
	for _, k := range []string{"Fencing-Token", "X-Tenant", "Content-Type", "User-Agent", "Accept", "Accept-Encoding", "Traceparent", "Connection"} {
		r.Header.Set(k, "v")
	}
	r.Header.Set("Connection", "keep-alive")
	g := &Gateway{tokenHeader: "Fencing-Token"}
	rt := &Route{decided: []string{"X-Tenant"}}
	b.ReportAllocs()
	for b.Loop() {
		if checkMethod(r) != nil || checkHeaders(r, g.decidedHeaders(rt)) != nil {
			b.Fatal("refused")
		}
	}
}
