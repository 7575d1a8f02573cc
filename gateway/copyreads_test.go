package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// copyUpstream names a request's object by its path (/bucket/key) and the
// object it copies from by X-Copy-Source (bucket/key), as an object
// store's dialect does; X-Foreign-Source is a source it cannot name.
type copyUpstream struct{ forwarded atomic.Int64 }

func splitObject(p string) map[string]string {
	b, k, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return map[string]string{"bucket": b, "key": k}
}

func (u *copyUpstream) Inspect(r *http.Request, _ int64) (gateway.Inspection, error) {
	insp := gateway.Inspection{Vars: splitObject(r.URL.Path)}
	if src := r.Header.Get("X-Copy-Source"); src != "" {
		insp.Reads = []map[string]string{splitObject(src)}
	}
	if r.Header.Get("X-Foreign-Source") != "" {
		insp.ReadsUnnamed = fencegate.InvalidRequest("the copy source is in another account")
	}
	return insp, nil
}

func (u *copyUpstream) Forward(w http.ResponseWriter, _ *http.Request, _ *gateway.Request) error {
	u.forwarded.Add(1)
	w.WriteHeader(http.StatusOK)
	return nil
}

// prefixAuth is an identity limited to the prefix its header names.
type prefixAuth struct{}

func (prefixAuth) Authenticate(r *http.Request) (gateway.Identity, error) {
	return gateway.Identity{Owner: "worker", Prefixes: []string{r.Header.Get("X-Prefix")}}, nil
}

func copyGateway(t *testing.T, fenceReads bool, tmpl string) (*httptest.Server, *gateway.LocalFence, *copyUpstream) {
	t.Helper()
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	g := gateway.New(f, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	up := &copyUpstream{}
	rt, err := gateway.NewRoute(gateway.RouteOptions{
		Name: "objects", Resource: tmpl, FenceReads: fenceReads,
		Vars: func(n string) bool { return n == "bucket" || n == "key" },
	}, up)
	if err != nil {
		t.Fatal(err)
	}
	rt.Auth = prefixAuth{}
	g.SetRoutes([]*gateway.Route{rt})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv, f, up
}

// On a route with fence_reads, an object a request reads (a copy's
// source) is authorized and fenced as a GET of it is: a worker cannot copy
// from outside its prefixes, nor with a token below the source's fence;
// without fence_reads reads stay unfenced and unauthorized.
func TestCopySourceIsARead(t *testing.T) {
	hdr := func(token, prefix string, extra ...string) map[string][]string {
		h := map[string][]string{"Fencing-Token": {token}, "X-Prefix": {prefix}}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = []string{extra[i+1]}
		}
		return h
	}
	tests := []struct {
		name       string
		fenceReads bool
		tmpl       string
		headers    map[string][]string
		wantStatus int
		wantCode   string
		// wantSource: the source's fence after the request.
		wantSource int64
	}{
		{"outside the prefixes", true, "{bucket}/{key}", hdr("7", "b/mine/", "X-Copy-Source", "b/other/secret"), 403, fencegate.CodeForbidden, 5},
		{"below the source's fence", true, "{bucket}/{key}", hdr("3", "b/", "X-Copy-Source", "b/other/secret"), 409, fencegate.CodeStaleToken, 5},
		{"current token inside the prefixes", true, "{bucket}/{key}", hdr("7", "b/", "X-Copy-Source", "b/other/secret"), 200, "", 7},
		{"a source the upstream cannot name", true, "{bucket}/{key}", hdr("7", "b/", "X-Foreign-Source", "x"), 400, fencegate.CodeInvalidRequest, 5},
		{"a template of the request's path", true, "{path}", hdr("7", "/b/", "X-Copy-Source", "b/other/secret"), 400, fencegate.CodeInvalidResource, 5},
		// Reads not fenced: today's behaviour, the source is not looked at.
		{"no fence_reads, outside the prefixes", false, "{bucket}/{key}", hdr("7", "b/mine/", "X-Copy-Source", "b/other/secret"), 200, "", 5},
		{"no fence_reads, stale for the source", false, "{bucket}/{key}", hdr("3", "b/", "X-Copy-Source", "b/other/secret"), 200, "", 5},
		{"no fence_reads, unnamed source", false, "{bucket}/{key}", hdr("7", "b/", "X-Foreign-Source", "x"), 200, "", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, f, up := copyGateway(t, tc.fenceReads, tc.tmpl)
			src := "b/other/secret"
			if tc.tmpl == "{path}" {
				src = "/b/other/secret"
			}
			if _, err := f.Advance(context.Background(), src, 5, "other"); err != nil {
				t.Fatal(err)
			}
			st, body := do(t, http.MethodPut, srv.URL+"/b/mine/copy", tc.headers, "")
			if st != tc.wantStatus || tc.wantCode != "" && !strings.Contains(body, `"error":"`+tc.wantCode+`"`) {
				t.Fatalf("copy: %d %s; want %d %s", st, body, tc.wantStatus, tc.wantCode)
			}
			if n, want := up.forwarded.Load(), int64(0); st == 200 && n != 1 || st != 200 && n != want {
				t.Fatalf("forwarded %d requests after a %d", n, st)
			}
			fs, err := f.State(context.Background(), src)
			if err != nil {
				t.Fatal(err)
			}
			if fs.Highest != tc.wantSource {
				t.Fatalf("the source's fence is %d; want %d", fs.Highest, tc.wantSource)
			}
		})
	}
}
