package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

// A case_insensitive route's upstream folds case, so /docs/Ünterlagen and
// /docs/ünterlagen are one object there. The {path} key must fold the
// letters themselves, not the percent-escaped form the path is carried in
// (where Ü is %C3%9C and ü is %C3%BC, which an ASCII fold never joins):
// otherwise a zombie re-spelling the name in another case gets a fresh
// fence for the same object.
func TestReviewCaseInsensitiveNonASCII(t *testing.T) {
	g := newTestGateway(t, `
    - name: ci
      match: {path_prefix: /docs/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      case_insensitive: true
`)
	if st, body := do(t, "PUT", g.URL+"/docs/%C3%BCnterlagen", tok("42"), "B"); st != 200 {
		t.Fatalf("owner's write: %d %s", st, body)
	}
	for _, p := range []string{"/docs/%C3%9Cnterlagen", "/docs/\u00dcnterlagen", "/DOCS/%C3%9CNTERLAGEN"} {
		if st, _ := putSpelling(t, g.URL, p, "41"); st != 409 {
			t.Errorf("%s with token 41 after 42 on /docs/ünterlagen: status %d; want 409", p, st)
		}
	}
	if h := g.rec.History(); len(h) != 1 {
		t.Fatalf("upstream got %d writes; want only B's", len(h))
	}
}

// Rails (Rack::MethodOverride), Laravel and Symfony apply a POST's
// _method parameter (form body; Symfony and Laravel also read the query)
// as the method, like the X-HTTP-Method-Override header checkMethod
// refuses. On a route whose fenced_methods leave POST out, a zombie's
// POST ?_method=DELETE is not fenced and the upstream applies a DELETE,
// which is.
func TestReviewMethodOverrideParameter(t *testing.T) {
	var deleted []string
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		for k, vs := range r.URL.Query() {
			// PHP's reading of parameter names: "." and " " are "_".
			if strings.NewReplacer(".", "_", " ", "_").Replace(k) == "_method" && vs[0] == "DELETE" {
				deleted = append(deleted, r.URL.Path)
			}
		}
	})
	g := newTestGatewayFor(t, `
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
      fenced_methods: [PUT, PATCH, DELETE]
`, up)
	if st, body := do(t, "DELETE", g.URL+"/orders/7", tok("42"), ""); st != 200 {
		t.Fatalf("owner's DELETE: %d %s", st, body)
	}
	for _, q := range []string{"_method=DELETE", "x=1&_m%65thod=DELETE", ".method=DELETE"} {
		deleted = nil
		st, _ := do(t, "POST", g.URL+"/orders/7?"+q, tok("41"), "")
		if len(deleted) > 0 || st != http.StatusBadRequest {
			t.Errorf("POST ?%s with token 41 after 42: %d, upstream applied as DELETE: %v; want 400, nothing forwarded", q, st, deleted)
		}
	}
}
