package auth_test

import (
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
