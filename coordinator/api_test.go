package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/coordinator"
)

type apiEnv struct {
	srv   *httptest.Server
	svc   *coordinator.Service
	store *bolt.Store
}

func newAPI(t *testing.T) *apiEnv {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fencegate.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := &coordinator.Service{Backend: bolt.NewLeases(st), DefaultTTL: 30 * time.Second, MaxTTL: time.Minute, MaxWait: 10 * time.Second}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &apiEnv{srv: srv, svc: svc, store: st}
}

// do sends body to path (GET if body is "") and returns status, the decoded
// JSON object and the raw body.
func (e *apiEnv) do(t *testing.T, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	var resp *http.Response
	var err error
	if body == "" {
		resp, err = http.Get(e.srv.URL + path)
	} else {
		resp, err = http.Post(e.srv.URL+path, "application/json", strings.NewReader(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: answer is not a JSON object: %s", path, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	return resp.StatusCode, m, resp.Header
}

func keys(m map[string]any) string { return strings.Join(slices.Sorted(maps.Keys(m)), ",") }

func TestAPIContract(t *testing.T) {
	e := newAPI(t)
	st, m, _ := e.do(t, "/v1/leases/acquire", `{"resource":"/orders/7","owner":"A","ttl":"30s"}`)
	if st != 200 || keys(m) != "expires_at,held,owner,resource,token,ttl" || m["resource"] != "/orders/7" || m["owner"] != "A" || m["held"] != true {
		t.Fatalf("acquire = %d %v", st, m)
	}
	tok := m["token"].(float64)
	if _, err := time.Parse(time.RFC3339Nano, m["expires_at"].(string)); err != nil {
		t.Errorf("expires_at %v: %v", m["expires_at"], err)
	}

	st, m, _ = e.do(t, "/v1/leases/acquire", `{"resource":"/orders/7","owner":"B","ttl":2.5}`)
	if st != 409 || m["error"] != "lease_held" || m["owner"] != "A" || m["expires_at"] == nil || m["resource"] != "/orders/7" {
		t.Errorf("acquire of a held lease = %d %v; want 409 lease_held naming A", st, m)
	}

	st, m, _ = e.do(t, "/v1/leases/renew", `{"resource":"/orders/7","owner":"A","token":`+ftoa(tok)+`,"ttl":"20s"}`)
	if st != 200 || m["token"] != tok || m["ttl"] == nil {
		t.Errorf("renew = %d %v", st, m)
	}
	st, m, _ = e.do(t, "/v1/leases/renew", `{"resource":"/orders/7","owner":"A","token":`+ftoa(tok+1)+`}`)
	if st != 409 || m["error"] != "lease_lost" || m["token"] != tok+1 {
		t.Errorf("renew with a wrong token = %d %v; want 409 lease_lost", st, m)
	}

	st, m, _ = e.do(t, "/v1/leases?resource=%2Forders%2F7", "")
	if st != 200 || m["owner"] != "A" || m["token"] != tok || m["held"] != true {
		t.Errorf("show = %d %v", st, m)
	}
	for i, want := range []bool{true, false} {
		st, m, _ = e.do(t, "/v1/leases/release", `{"resource":"/orders/7","owner":"A","token":`+ftoa(tok)+`}`)
		if st != 200 || keys(m) != "released" || m["released"] != want {
			t.Errorf("release #%d = %d %v; want released %v", i+1, st, m, want)
		}
	}
	st, m, _ = e.do(t, "/v1/leases?resource=/orders/7", "")
	if st != 200 || m["held"] != false || m["token"] != tok {
		t.Errorf("show after release = %d %v; want held false with the last token", st, m)
	}
	st, m, _ = e.do(t, "/v1/leases?resource=/never", "")
	if st != 200 || m["held"] != false || m["token"] != 0.0 || m["expires_at"] != nil {
		t.Errorf("show of a never-leased resource = %d %v", st, m)
	}
}

func ftoa(f float64) string { b, _ := json.Marshal(f); return string(b) }

func TestAPIInvalidRequests(t *testing.T) {
	e := newAPI(t)
	for _, tc := range []struct{ name, path, body string }{
		{"unknown field", "/v1/leases/acquire", `{"resource":"r","owner":"o","ttl_ms":5}`},
		{"malformed JSON", "/v1/leases/acquire", `{"resource":`},
		{"two values", "/v1/leases/acquire", `{"resource":"r","owner":"o"} {}`},
		{"bad duration", "/v1/leases/acquire", `{"resource":"r","owner":"o","ttl":"soon"}`},
		{"ttl above max_ttl", "/v1/leases/acquire", `{"resource":"r","owner":"o","ttl":"2m"}`},
		{"negative ttl", "/v1/leases/acquire", `{"resource":"r","owner":"o","ttl":-1}`},
		{"wait above max_wait", "/v1/leases/acquire", `{"resource":"r","owner":"o","wait":"11s"}`},
		{"no resource", "/v1/leases/acquire", `{"owner":"o"}`},
		{"no owner", "/v1/leases/acquire", `{"resource":"r"}`},
		{"control character", "/v1/leases/acquire", `{"resource":"r\n","owner":"o"}`},
		{"resource too long", "/v1/leases/acquire", `{"resource":"` + strings.Repeat("x", coordinator.MaxResourceBytes+1) + `","owner":"o"}`},
		{"renew without token", "/v1/leases/renew", `{"resource":"r","owner":"o"}`},
		{"negative token", "/v1/leases/release", `{"resource":"r","owner":"o","token":-3}`},
		{"release with ttl", "/v1/leases/release", `{"resource":"r","owner":"o","token":3,"ttl":"1s"}`},
		{"show without resource", "/v1/leases", ""},
		{"show with two resources", "/v1/leases?resource=a&resource=b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, m, _ := e.do(t, tc.path, tc.body)
			if st != 400 || m["error"] != "invalid_request" || m["message"] == "" {
				t.Errorf("= %d %v; want 400 invalid_request", st, m)
			}
		})
	}
}

func TestOnIssue(t *testing.T) {
	e := newAPI(t)
	var calls []int64
	fail := false
	e.svc.OnIssue = func(ctx context.Context, resource string, token int64, owner string) error {
		calls = append(calls, token)
		if fail {
			return errors.New("fence store down")
		}
		return nil
	}
	_, m, _ := e.do(t, "/v1/leases/acquire", `{"resource":"r","owner":"A"}`)
	e.do(t, "/v1/leases/acquire", `{"resource":"r","owner":"A"}`) // retried: same token, no call
	if len(calls) != 1 || float64(calls[0]) != m["token"] {
		t.Fatalf("OnIssue calls %v; want one with token %v", calls, m["token"])
	}
	fail = true
	st, m, h := e.do(t, "/v1/leases/acquire", `{"resource":"s","owner":"A"}`)
	if st != 503 || m["error"] != "fence_unavailable" || h.Get("Retry-After") == "" {
		t.Fatalf("acquire with OnIssue failing = %d %v; want 503 with Retry-After", st, m)
	}
	// The lease whose hook failed was released: someone else can take it.
	fail = false
	st, m, _ = e.do(t, "/v1/leases/acquire", `{"resource":"s","owner":"B"}`)
	if st != 200 || m["token"].(float64) <= float64(calls[1]) {
		t.Errorf("acquire after a failed OnIssue = %d %v; want B with a token above %d", st, m, calls[1])
	}
}

func TestAPIStoreUnavailable(t *testing.T) {
	e := newAPI(t)
	e.store.Close()
	for _, tc := range []struct{ path, body string }{
		{"/v1/leases/acquire", `{"resource":"r","owner":"A"}`},
		{"/v1/leases/renew", `{"resource":"r","owner":"A","token":1}`},
		{"/v1/leases/release", `{"resource":"r","owner":"A","token":1}`},
		{"/v1/leases?resource=r", ""},
	} {
		st, m, h := e.do(t, tc.path, tc.body)
		if st != 503 || m["error"] != "fence_unavailable" || h.Get("Retry-After") != "1" {
			t.Errorf("%s with the store closed = %d %v; want 503 fence_unavailable, Retry-After 1", tc.path, st, m)
		}
	}
}

// TestTokenMinusOne: -1 is the validator's "no token in this request"
// sentinel; a client's token -1 on renew or release is not a positive
// token and must be invalid_request like any other, not slip through to
// the store as a lookup.
func TestTokenMinusOne(t *testing.T) {
	e := newAPI(t)
	for _, path := range []string{"/v1/leases/renew", "/v1/leases/release"} {
		st, m, _ := e.do(t, path, `{"resource":"r","owner":"o","token":-1}`)
		if st != 400 || m["error"] != "invalid_request" {
			t.Errorf("%s with token -1 = %d %v; want 400 invalid_request", path, st, m)
		}
	}
}
