package auth_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/auth"
)

// TestMiddleware: the coordinator and admin APIs' guard. Credentials are
// required except on open paths; an identity with prefixes may only name
// resources under them, in the query or the JSON body, and the API still
// reads the body whole.
func TestMiddleware(t *testing.T) {
	a, err := auth.New(auth.Options{APIKeys: []auth.APIKey{
		{Owner: "billing-worker", SHA256: auth.HashKey("kb"), Prefixes: []string{"/billing/"}},
		{Owner: "ops", SHA256: auth.HashKey("ko")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := auth.Middleware(a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.IdentityFrom(r.Context())
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, id.Owner+" "+string(b))
	}), "/healthz")

	tests := []struct {
		name, method, target, key, body string
		status                          int
		answer                          string
	}{
		{"probe open", "GET", "/healthz", "", "", 200, " "},
		{"no key", "GET", "/v1/leases?resource=/billing/1", "", "", 401, ""},
		{"wrong key", "GET", "/v1/leases?resource=/billing/1", "kx", "", 401, ""},
		{"query inside prefix", "GET", "/v1/leases?resource=/billing/1", "kb", "", 200, "billing-worker "},
		{"query outside prefix", "GET", "/v1/leases?resource=/orders/1", "kb", "", 403, ""},
		{"body inside prefix", "POST", "/v1/leases/acquire", "kb", `{"resource":"/billing/2","owner":"w"}`, 200, `billing-worker {"resource":"/billing/2","owner":"w"}`},
		{"body outside prefix", "POST", "/v1/leases/acquire", "kb", `{"resource":"/orders/2"}`, 403, ""},
		{"no resource named", "POST", "/v1/fences/advance", "kb", `{}`, 403, ""},
		{"unrestricted identity", "POST", "/v1/leases/acquire", "ko", `{"resource":"/orders/2"}`, 200, `ops {"resource":"/orders/2"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			if tc.body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			if tc.key != "" {
				r.Header.Set("Authorization", "Bearer "+tc.key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d (%s); want %d", w.Code, w.Body, tc.status)
			}
			if tc.status == 200 && w.Body.String() != tc.answer {
				t.Fatalf("handler saw %q; want %q", w.Body, tc.answer)
			}
			if tc.status == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if tc.status >= 400 && w.Header().Get("Content-Type") != "application/json" {
				t.Errorf("refusal is %q, not JSON", w.Header().Get("Content-Type"))
			}
		})
	}
}

func TestNewWithoutCredentials(t *testing.T) {
	for _, c := range []auth.Options{{}, {APIKeys: []auth.APIKey{}}} {
		a, err := auth.New(c)
		if err != nil || a != nil {
			t.Fatalf("New(%+v) = %v, %v; want nil, nil (no credentials asked)", c, a, err)
		}
	}
}

// TestMiddlewareScopeDecoys: a key limited to /billing/eu/ must not reach
// another resource through a resource the guard checks but the API does
// not act on: an allowed one in the query while the body names another,
// a second query value, a body whose first JSON value names another
// resource followed by data that makes the whole body invalid JSON, or a
// name whose canonical form (what the APIs act on) is outside the prefix.
func TestMiddlewareScopeDecoys(t *testing.T) {
	a, err := auth.New(auth.Options{APIKeys: []auth.APIKey{
		{Owner: "worker-a", SHA256: auth.HashKey("ka"), Prefixes: []string{"/billing/eu/"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The API: acts on the first JSON value's resource, as the coordinator
	// and fence APIs decode it, else on the first query value.
	h := auth.Middleware(a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v struct {
			Resource string `json:"resource"`
		}
		json.NewDecoder(r.Body).Decode(&v)
		if v.Resource == "" {
			v.Resource = r.URL.Query().Get("resource")
		}
		io.WriteString(w, v.Resource)
	}))
	for _, tc := range []struct{ name, target, body string }{
		{"query decoy, body elsewhere", "/v1/leases/acquire?resource=/billing/eu/1", `{"resource":"/orders/1","owner":"w"}`},
		{"second query value", "/v1/leases?resource=/billing/eu/1&resource=/orders/1", ""},
		{"query decoy, body with trailing data", "/v1/fences/advance?resource=/billing/eu/1", `{"resource":"/orders/1","token":9} x`},
		{"canonical form outside the prefix", "/v1/fences/advance", `{"resource":"/billing/eu/.","token":9}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", tc.target, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer ka")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusForbidden {
				t.Fatalf("status %d, the API acted on %q; want 403", w.Code, w.Body)
			}
		})
	}
}

// TestMiddlewareBindOwner: a key with bind_owner may name only its own
// owner (or owner/...) in a coordinator or admin body, whatever spelling
// of the field the APIs' decoder accepts (any case; the last duplicate
// wins); a key without it, and a body naming no owner, pass through.
func TestMiddlewareBindOwner(t *testing.T) {
	a, err := auth.New(auth.Options{APIKeys: []auth.APIKey{
		{Owner: "worker-a", SHA256: auth.HashKey("bound"), BindOwner: true},
		{Owner: "ops", SHA256: auth.HashKey("free")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The API: answers the owner as the coordinator decodes it.
	h := auth.Middleware(a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v struct {
			Owner string `json:"owner"`
		}
		json.NewDecoder(r.Body).Decode(&v)
		io.WriteString(w, v.Owner)
	}))
	for _, tc := range []struct {
		key, body string
		want      int
	}{
		{"bound", `{"resource":"/r","owner":"worker-a"}`, http.StatusOK},
		{"bound", `{"resource":"/r","owner":"worker-a/host-7"}`, http.StatusOK},
		{"bound", `{"resource":"/r","token":9}`, http.StatusOK}, // names no owner (a hand advance)
		{"bound", `{"resource":"/r","owner":"worker-b"}`, http.StatusForbidden},
		{"bound", `{"resource":"/r","owner":"worker-ab"}`, http.StatusForbidden},
		{"bound", `{"resource":"/r","Owner":"worker-b"}`, http.StatusForbidden},
		{"bound", `{"resource":"/r","owner":"worker-a","OWNER":"worker-b"}`, http.StatusForbidden},
		{"bound", `{"resource":"/r","owner":"worker-b"} {"owner":"worker-a"}`, http.StatusForbidden},
		{"free", `{"resource":"/r","owner":"worker-b"}`, http.StatusOK},
	} {
		r := httptest.NewRequest("POST", "/v1/leases/release", strings.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+tc.key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("key %s, body %s: status %d (the API saw owner %q); want %d", tc.key, tc.body, w.Code, w.Body, tc.want)
		}
	}
	// The coordinator decodes JSON whatever the Content-Type says: the
	// check must not rest on another layer refusing other types.
	for _, ct := range []string{"text/plain", ""} {
		r := httptest.NewRequest("POST", "/v1/leases/release", strings.NewReader(`{"resource":"/r","owner":"worker-b"}`))
		r.Header.Set("Content-Type", ct)
		r.Header.Set("Authorization", "Bearer bound")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden {
			t.Errorf("Content-Type %q: status %d (the API saw owner %q); want 403", ct, w.Code, w.Body)
		}
	}
}
