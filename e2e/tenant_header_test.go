package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTenantHeaderPathFenced: on a route keyed "tenant:{header.X-Tenant}/
// {path}" in front of an upstream that serves each tenant from the
// directory its header names (nginx's `root /srv/$http_x_tenant;`), a
// header value that reads as a path (X-Tenant: a/b, with /x) names the
// file of another tenant's path (tenant a's /b/x) under another key: it is
// refused, and the file stays the owner's. Before, the zombie's token 5
// overwrote the file fenced at 100. A value without '/' still writes.
func TestTenantHeaderPathFenced(t *testing.T) {
	root := t.TempDir()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := filepath.Join(root, r.Header.Get("X-Tenant"), filepath.FromSlash(r.URL.Path))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) || r.Method != http.MethodPut {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	route := fmt.Sprintf(`    - name: tenants
      match: {path_prefix: /}
      upstream: {url: %q, timeout: 10s}
      resource: "tenant:{header.X-Tenant}/{path}"
`, up.URL)
	gw := "http://" + startFencegate(t, httpGatewayYAML(route)).addrs["gateway"]
	put := func(tenant, path, token, body string) (int, string) {
		return send(t, "PUT", gw+path, [][2]string{{"X-Tenant", tenant}, {"Fencing-Token", token}}, body)
	}
	stored := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return "<absent>"
		}
		return string(b)
	}
	if st, body := put("a", "/b/x", "100", "owner"); st != http.StatusCreated {
		t.Fatalf("tenant a's PUT /b/x with 100: %d %s", st, body)
	}
	for _, z := range []struct{ tenant, path string }{{"a/b", "/x"}, {"a/./b", "/x"}, {"a/c/../b", "/x"}, {".", "/a/b/x"}, {`a\b`, "/x"}} {
		st, body := put(z.tenant, z.path, "5", "zombie")
		if st != http.StatusBadRequest || refusalCode(body) != "invalid_resource" {
			t.Errorf("X-Tenant %q PUT %s with 5: %d %s; want 400 invalid_resource", z.tenant, z.path, st, body)
		}
		if got := stored("a/b/x"); got != "owner" {
			t.Fatalf("after X-Tenant %q PUT %s with 5, a/b/x = %q; want the owner's", z.tenant, z.path, got)
		}
	}
	if st, body := put("b", "/x", "5", "b's"); st != http.StatusCreated || stored("b/x") != "b's" {
		t.Fatalf("tenant b's PUT /x with 5: %d %s; b/x = %q", st, body, stored("b/x"))
	}
}
