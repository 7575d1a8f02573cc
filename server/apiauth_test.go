package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/auth"
)

// TestScopedKeyQueryDecoy: an identity limited to /billing/ must not act on
// another resource by naming an allowed one in the query string while the
// API acts on the "resource" of the JSON body (the coordinator's acquire,
// the admin's advance read only the body).
func TestScopedKeyQueryDecoy(t *testing.T) {
	const scoped = "scoped-key"
	yaml := fmt.Sprintf(`
store: {embedded: {path: $DIR/fg.db}}
admin:
  listen: 127.0.0.1:0
  auth: {api_keys: [{owner: ops-billing, sha256: "%[1]s", prefixes: [/billing/]}, {owner: ops, sha256: "%[2]s"}]}
coordinator:
  enabled: true
  listen: 127.0.0.1:0
  auth: {api_keys: [{owner: worker-a, sha256: "%[1]s", prefixes: [/billing/]}, {owner: ops, sha256: "%[2]s"}]}
gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: all, match: {path_prefix: /}, upstream: {url: $UPSTREAM}, resource: "{path}"}
`, auth.HashKey(scoped), auth.HashKey("ops-key"))
	s, _ := startEdge(t, yaml, "http://127.0.0.1:1")
	h := map[string]string{"Authorization": "Bearer " + scoped, "Content-Type": "application/json"}
	c := http.DefaultClient

	for _, tc := range []struct{ name, url, body string }{
		{"coordinator acquire", "http://" + s.Addr("coordinator") + "/v1/leases/acquire?resource=/billing/decoy",
			`{"resource":"/orders/1","owner":"intruder","ttl":"10m"}`},
		{"admin advance", "http://" + s.Addr("admin") + "/v1/fences/advance?resource=/billing/decoy",
			`{"resource":"/orders/1","token":1000000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, c, "POST", tc.url, strings.NewReader(tc.body), h)
			if a.Status != http.StatusForbidden {
				t.Fatalf("a key limited to /billing/ acted on /orders/1: %d %s", a.Status, a.Body)
			}
		})
	}
	// Listings are not resource-scoped: naming an allowed resource in the
	// query must not unlock them either. /orders/1 gets a lease and a
	// fence from an unrestricted key first.
	ops := map[string]string{"Authorization": "Bearer ops-key", "Content-Type": "application/json"}
	if a := do(t, c, "POST", "http://"+s.Addr("coordinator")+"/v1/leases/acquire", strings.NewReader(`{"resource":"/orders/1","owner":"ops"}`), ops); a.Status != 200 {
		t.Fatalf("ops acquire: %d %s", a.Status, a.Body)
	}
	for _, p := range []string{"/v1/leases?resource=/billing/decoy", "/v1/refusals?resource=/billing/decoy",
		"/leases?resource=/billing/decoy", "/fences?resource=/billing/decoy", "/v1/fences"} {
		// The body names an allowed resource too: GET /v1/fences without
		// ?resource= is the listing of every fence.
		a := do(t, c, "GET", "http://"+s.Addr("admin")+p, strings.NewReader(`{"resource":"/billing/decoy"}`), h)
		if a.Status == http.StatusOK && strings.Contains(a.Body, "/orders/1") {
			t.Errorf("GET %s shows a resource outside the key's prefixes: %s", p, a.Body)
		}
	}
	// What the key may do still works.
	if a := do(t, c, "GET", "http://"+s.Addr("admin")+"/v1/fences?resource=/billing/7", nil, h); a.Status != http.StatusOK {
		t.Errorf("GET /v1/fences?resource=/billing/7: %d %s", a.Status, a.Body)
	}
	if a := do(t, c, "POST", "http://"+s.Addr("coordinator")+"/v1/leases/acquire",
		strings.NewReader(`{"resource":"/billing/7","owner":"worker-a"}`), h); a.Status != http.StatusOK {
		t.Errorf("acquire /billing/7: %d %s", a.Status, a.Body)
	}
}

// TestReloadKeepsAuthOnBoundListener: a listener's address changes only at
// a restart, but its auth at every reload. A reload whose file moves the
// admin (or coordinator) listener to loopback and drops its auth block
// passes validation (loopback needs no auth), yet the listener still
// serves on the wildcard address it was bound to: the reload must not
// leave an API open to the network without credentials.
func TestReloadKeepsAuthOnBoundListener(t *testing.T) {
	const key = "ops-key"
	withAuth := fmt.Sprintf(`
store: {embedded: {path: $DIR/fg.db}}
admin:
  listen: 0.0.0.0:0
  auth: {api_keys: [{owner: ops, sha256: "%[1]s"}]}
coordinator:
  enabled: true
  listen: 0.0.0.0:0
  auth: {api_keys: [{owner: ops, sha256: "%[1]s"}]}
gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: all, match: {path_prefix: /}, upstream: {url: $UPSTREAM}, resource: "{path}"}
`, auth.HashKey(key))
	s, _ := startEdge(t, withAuth, "http://127.0.0.1:1")
	_, adminPort, _ := strings.Cut(s.Addr("admin"), "]:")
	_, coordPort, _ := strings.Cut(s.Addr("coordinator"), "]:")
	if adminPort == "" || coordPort == "" {
		t.Fatalf("listeners %s, %s: not bound to the wildcard address", s.Addr("admin"), s.Addr("coordinator"))
	}
	advance := func() answer {
		return do(t, http.DefaultClient, "POST", "http://127.0.0.1:"+adminPort+"/v1/fences/advance",
			strings.NewReader(`{"resource":"/orders/1","token":5}`), map[string]string{"Content-Type": "application/json"})
	}
	acquire := func() answer {
		return do(t, http.DefaultClient, "POST", "http://127.0.0.1:"+coordPort+"/v1/leases/acquire",
			strings.NewReader(`{"resource":"/orders/1","owner":"intruder"}`), map[string]string{"Content-Type": "application/json"})
	}
	if a := advance(); a.Status != http.StatusUnauthorized {
		t.Fatalf("advance without a key before the reload: %d", a.Status)
	}
	noAuth := `
store: {embedded: {path: $DIR/fg.db}}
admin: {listen: 127.0.0.1:9090}
coordinator: {enabled: true, listen: 127.0.0.1:8081}
gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: all, match: {path_prefix: /}, upstream: {url: $UPSTREAM}, resource: "{path}"}
`
	check := func(step string, err error) {
		t.Helper()
		if a := advance(); a.Status != http.StatusUnauthorized {
			t.Errorf("%s (err %v): the admin listener, still on %s, advanced a fence without credentials: %d %s", step, err, s.Addr("admin"), a.Status, a.Body)
		}
		if a := acquire(); a.Status != http.StatusUnauthorized {
			t.Errorf("%s (err %v): the coordinator listener, still on %s, issued a lease without credentials: %d %s", step, err, s.Addr("coordinator"), a.Status, a.Body)
		}
	}
	err := s.Reload(parse(t, noAuth, "http://127.0.0.1:1", t.TempDir()))
	check("after the reload that drops auth", err)

	// In two steps: a first reload moves listen to loopback and keeps the
	// keys (accepted: the listener stays where it is), a second drops the
	// keys. The running configuration then names loopback, the listener
	// does not.
	loopbackWithAuth := strings.Replace(strings.Replace(withAuth, "0.0.0.0:0", "127.0.0.1:9090", 1), "0.0.0.0:0", "127.0.0.1:8081", 1)
	if err := s.Reload(parse(t, loopbackWithAuth, "http://127.0.0.1:1", t.TempDir())); err != nil {
		t.Fatalf("a reload that moves listen and keeps auth: %v", err)
	}
	err = s.Reload(parse(t, noAuth, "http://127.0.0.1:1", t.TempDir()))
	check("after moving listen, then dropping auth", err)
}

// TestBindOwnerKeepsLeasesApart: two workers share the /orders/ prefix with
// keys of their own. Anyone allowed on a resource can read its lease (owner
// and token), so without bind_owner worker A could renew or release B's
// lease, or re-acquire as B (the holder re-acquiring gets its token back),
// by naming B's owner. With bind_owner on A's key each such call is 403
// and B's lease record is unchanged; the unbound key shows the gap the
// setting closes.
func TestBindOwnerKeepsLeasesApart(t *testing.T) {
	yaml := fmt.Sprintf(`
store: {embedded: {path: $DIR/fg.db}}
# A free port: the default admin address (127.0.0.1:9090) may be taken by
# another program on the machine (Prometheus' default).
admin: {listen: 127.0.0.1:0}
coordinator:
  enabled: true
  listen: 127.0.0.1:0
  auth:
    api_keys:
      - {owner: worker-a, sha256: "%s", prefixes: [/orders/], bind_owner: true}
      - {owner: worker-b, sha256: "%s", prefixes: [/orders/], bind_owner: true}
      - {owner: legacy, sha256: "%s", prefixes: [/orders/]}
gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: all, match: {path_prefix: /}, upstream: {url: $UPSTREAM}, resource: "{path}"}
`, auth.HashKey("key-a"), auth.HashKey("key-b"), auth.HashKey("key-legacy"))
	s, _ := startEdge(t, yaml, "http://127.0.0.1:1")
	coord := "http://" + s.Addr("coordinator")
	c := http.DefaultClient
	as := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}
	}
	acquire := func(resource string) (token int64) {
		a := do(t, c, "POST", coord+"/v1/leases/acquire", strings.NewReader(`{"resource":"`+resource+`","owner":"worker-b/host-1","ttl":"10m"}`), as("key-b"))
		if a.Status != http.StatusOK {
			t.Fatalf("B's acquire of %s: %d %s", resource, a.Status, a.Body)
		}
		var l struct{ Token int64 }
		if err := json.Unmarshal([]byte(a.Body), &l); err != nil {
			t.Fatal(err)
		}
		return l.Token
	}
	holder := func(resource string) string {
		a := do(t, c, "GET", coord+"/v1/leases?resource="+resource, nil, as("key-b"))
		var l struct{ Owner string }
		json.Unmarshal([]byte(a.Body), &l)
		return l.Owner
	}

	tok := acquire("/orders/1")
	lease := fmt.Sprintf(`{"resource":"/orders/1","owner":"worker-b/host-1","token":%d}`, tok)
	for _, call := range []struct{ path, body string }{
		{"/v1/leases/renew", lease},
		{"/v1/leases/release", lease},
		{"/v1/leases/acquire", `{"resource":"/orders/1","owner":"worker-b/host-1"}`},
	} {
		if a := do(t, c, "POST", coord+call.path, strings.NewReader(call.body), as("key-a")); a.Status != http.StatusForbidden {
			t.Errorf("A's %s as B: %d %s; want 403", call.path, a.Status, a.Body)
		}
	}
	if got := holder("/orders/1"); got != "worker-b/host-1" {
		t.Fatalf("after A's attempts the lease is held by %q; want B's", got)
	}
	// A acts as itself.
	if a := do(t, c, "POST", coord+"/v1/leases/acquire", strings.NewReader(`{"resource":"/orders/2","owner":"worker-a"}`), as("key-a")); a.Status != http.StatusOK {
		t.Errorf("A's own acquire: %d %s", a.Status, a.Body)
	}
	// The unbound key can still release B's lease: what bind_owner is for.
	if a := do(t, c, "POST", coord+"/v1/leases/release", strings.NewReader(lease), as("key-legacy")); a.Status != http.StatusOK || !strings.Contains(a.Body, `"released":true`) {
		t.Fatalf("the unbound key's release: %d %s", a.Status, a.Body)
	}
}
