package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
)

// bodyNamingUpstream reads the request body during its inspection, as an
// object store's dialect reads the objects a DeleteObjects or a compose
// names (up to its own bound of 1 MiB): each line names an object it
// writes besides the path's. X-Swallow makes it ignore a read error and
// name what it read; X-Late leaves the body to its Forward, which turns a
// read error into a refusal of its own, as an upstream preparing a body
// does.
type bodyNamingUpstream struct {
	inspected atomic.Int64 // body bytes the inspections read
	forwarded atomic.Int64
}

func (u *bodyNamingUpstream) Inspect(r *http.Request, _ int64) (gateway.Inspection, error) {
	insp := gateway.Inspection{Vars: splitObject(r.URL.Path)}
	if r.Header.Get("X-Late") != "" {
		return insp, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	u.inspected.Add(int64(len(b)))
	if err != nil && r.Header.Get("X-Swallow") == "" {
		return gateway.Inspection{}, fencegate.InvalidRequest("reading the body: %v", err)
	}
	insp.Objects = []map[string]string{insp.Vars} // Objects lists every object written
	for _, name := range strings.Fields(string(b)) {
		insp.Objects = append(insp.Objects, map[string]string{"bucket": insp.Vars["bucket"], "key": name})
	}
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	return insp, nil
}

func (u *bodyNamingUpstream) Forward(w http.ResponseWriter, r *http.Request, _ *gateway.Request) error {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return fencegate.InvalidRequest("the body ended early")
	}
	u.forwarded.Add(1)
	w.WriteHeader(http.StatusOK)
	return nil
}

// A route's max_body_bytes holds before the inspection reads the body:
// a body declared larger is refused unread, one of unknown length is cut
// at the limit, and either is refused 413 body_too_large, whatever the
// inspection made of the cut read, before the fence (the object's fence
// stays at 5) and the upstream. Before, the inspection read up to its own
// bound and the request was refused 413 after the fence admitted it
// (advancing the fence to 7), or 400 where the inspection refused.
func TestBodyLimitBeforeInspection(t *testing.T) {
	const limit = 100
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	var logs testenv.LogBuffer
	g := gateway.New(f, gateway.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	up := &bodyNamingUpstream{}
	rt, err := gateway.NewRoute(gateway.RouteOptions{
		Name: "objects", Resource: "{bucket}/{key}", MaxBodyBytes: limit,
		Vars: func(n string) bool { return n == "bucket" || n == "key" },
	}, up)
	if err != nil {
		t.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	names := func(n int) string { return strings.Repeat("name/xxxx\n", n/10) } // n bytes
	tests := []struct {
		name    string
		size    int
		chunked bool
		header  string // X-Swallow, X-Late or ""
		status  int
		// maxRead bounds what the inspection may read of the body.
		maxRead int64
	}{
		{"declared over the limit", 200, false, "", 413, 0},
		{"chunked over the limit", 200, true, "", 413, limit},
		{"chunked over the limit, the read error ignored", 200, true, "X-Swallow", 413, limit},
		{"chunked over the limit, read by the forward", 200, true, "X-Late", 413, 0},
		{"chunked at the limit", limit, true, "", 200, limit},
		{"declared at the limit", limit, false, "", 200, limit},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "b/obj" + string(rune('a'+i))
			ctx := context.Background()
			if _, err := f.Advance(ctx, key, 5, "other"); err != nil {
				t.Fatal(err)
			}
			up.inspected.Store(0)
			up.forwarded.Store(0)
			mark := len(logs.String())
			var body io.Reader = strings.NewReader(names(tc.size))
			if tc.chunked {
				body = io.MultiReader(body) // no length: sent chunked
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/"+key, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Fencing-Token", "7")
			if tc.header != "" {
				req.Header.Set(tc.header, "1")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || tc.status == 413 && !strings.Contains(string(b), fencegate.CodeBodyTooLarge) {
				t.Fatalf("%d %s; want %d", resp.StatusCode, b, tc.status)
			}
			if n := up.inspected.Load(); n > tc.maxRead {
				t.Errorf("the inspection read %d bytes of the body; want at most %d", n, tc.maxRead)
			}
			st, err := f.State(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			wantFence, wantForwarded := int64(5), int64(0)
			switch {
			case tc.status == 200:
				wantFence, wantForwarded = 7, 1
			case tc.header == "X-Late":
				// Read after the fence, as a streamed body is: admitted,
				// then refused before anything reached the store.
				wantFence = 7
			}
			if st.Highest != wantFence {
				t.Errorf("the object's fence is %d; want %d", st.Highest, wantFence)
			}
			if n := up.forwarded.Load(); n != wantForwarded {
				t.Errorf("the upstream applied %d writes; want %d", n, wantForwarded)
			}
			if tc.status == 413 {
				// The refusal's log line says where the request went:
				// its resource once known, else its path.
				want := `"resource":"` + key + `"`
				if wantFence == 5 {
					want = `"path":"/` + key + `"`
				}
				if line := logs.String()[mark:]; !strings.Contains(line, `"msg":"body_too_large"`) || !strings.Contains(line, `"route":"objects","method":"POST",`+want) {
					t.Errorf("the refusal was logged as %s; want route, method and %s", line, want)
				}
			}
		})
	}
}
