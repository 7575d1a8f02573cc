package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/fencetest"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

// admitTree admits a write of key as a hierarchical {path} route does
// through a gateway.TreeFence: ScopeTree on the key, ScopeMember on every
// key above it.
func admitTree(f *SharedFence, key string, tok int64) (gateway.Permit, error) {
	return f.AdmitTree(context.Background(), gateway.Write{Resource: key, Token: tok, Scope: gateway.ScopeTree}, resource.Parents(key))
}

func refusalCode(err error) string {
	if ref := fencegate.AsError(err); ref != nil {
		return ref.Code
	}
	return ""
}

// TestTreeContract runs the hierarchical-keys suite of every shared fence
// (internal/fencetest.RunTree) over PostgreSQL, as two replicas.
func TestTreeContract(t *testing.T) {
	fencetest.RunTree(t, func(t *testing.T) fencetest.Open {
		url := testenv.Postgres(t).URL
		return func(t *testing.T) (gateway.Fence, func()) {
			st := openFenceStore(t, url, Options{MaxConns: 16})
			f := NewSharedFence(st, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := f.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			return f, func() { once.Do(func() { f.Close() }) }
		}
	})
}

// TestSharedTreeRepeatedTokenRoundTrips: a repeated token on a
// hierarchical key costs one round trip (the marker's pipeline reads the
// rows around it), no scan, no wait.
func TestSharedTreeRepeatedTokenRoundTrips(t *testing.T) {
	fs, _ := replicas(t, 1, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	f := fs[0]
	for _, w := range []struct {
		key string
		tok int64
	}{{"/dav/coll", 10}, {"/dav/coll/m", 11}} {
		p, err := admitTree(f, w.key, w.tok)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	rt := f.WaitedRoundTrips()
	p, err := admitTree(f, "/dav/coll/m", 11)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if got := f.WaitedRoundTrips() - rt; got != 1 {
		t.Fatalf("a repeated token's hierarchical write waited for %d round trips; want 1", got)
	}
}

// TestSharedKeyWithoutTree: the gateway hands every write of a route
// without a hierarchy to AdmitTree with no key above it; such a write is
// decided by its own marker alone, one round trip for a repeated token,
// not a second one reading rows it does not need.
func TestSharedKeyWithoutTree(t *testing.T) {
	fs, _ := replicas(t, 1, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	f := fs[0]
	admit := func(tok int64) error {
		p, err := f.AdmitTree(context.Background(), gateway.Write{Resource: "flat/k", Token: tok}, nil)
		if err == nil {
			p.Release()
		}
		return err
	}
	if err := admit(7); err != nil {
		t.Fatal(err)
	}
	rt := f.WaitedRoundTrips()
	if err := admit(7); err != nil {
		t.Fatal(err)
	}
	if got := f.WaitedRoundTrips() - rt; got != 1 {
		t.Fatalf("a repeated token on a key of no hierarchy waited for %d round trips; want 1", got)
	}
	if err := admit(6); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 6 after 7: %v; want stale", err)
	}
}

// TestSharedResetLowersBelow: `fencegate fence reset` of a member fenced
// with a token never issued (verification off) also lowers the below
// level it raised on the collections above, so the collections' owners
// are not refused by a token that no longer counts.
func TestSharedResetLowersBelow(t *testing.T) {
	fs, st := replicas(t, 1, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	// The collections were written themselves (fence rows): the members
	// raise their below levels.
	for _, key := range []string{"/r", "/r/c"} {
		p, err := admitTree(fs[0], key, 1)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	for key, tok := range map[string]int64{"/r/c/m": 100, "/r/c/n": 7} {
		p, err := admitTree(fs[0], key, tok)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	if _, err := admitTree(fs[0], "/r/c", 8); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection 8 below member 100: %v; want stale", err)
	}
	if _, err := st.ResetFence(context.Background(), "/r/c/m", 5, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := admitTree(fs[0], "/r/c", 6); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection 6 below member /r/c/n at 7 after the reset: %v; want stale", err)
	}
	for _, key := range []string{"/r/c", "/r"} {
		p, err := admitTree(fs[0], key, 8)
		if err != nil {
			t.Fatalf("collection %s with 8 after the member's reset to 5: %v", key, err)
		}
		p.Release()
	}
}

// recordingUpstream is the resource behind a test gateway: it keeps the
// last body written to each path (a DELETE removes it).
type recordingUpstream struct {
	mu    sync.Mutex
	files map[string]string
}

func (u *recordingUpstream) Forward(w http.ResponseWriter, r *http.Request, _ *gateway.Request) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	u.mu.Lock()
	if r.Method == http.MethodDelete {
		delete(u.files, r.URL.Path)
	} else {
		u.files[r.URL.Path] = string(body)
	}
	u.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (u *recordingUpstream) file(path string) (string, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b, ok := u.files[path]
	return b, ok
}

// TestSharedPathRouteRoundTrips: a write with a repeated token on a
// {path} route (ScopeKey on its key, ScopeMember on the tree keys of the
// collections above it) costs one database round trip, the marker's
// pipeline, which also reads the collections' rows; and that read still
// decides: after a newer DELETE of the collection, an older member write
// is refused and never reaches the upstream.
func TestSharedPathRouteRoundTrips(t *testing.T) {
	fs, st := replicas(t, 1, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	f := fs[0]
	up := &recordingUpstream{files: map[string]string{}}
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "dav", PathPrefix: "/dav/", Resource: "{path}"}, up)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(f, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	g.SetRoutes([]*gateway.Route{rt})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	send := func(method, path, token, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(fencegate.DefaultTokenHeader, token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const keys, writes = 4, 40
	for i := range keys { // the advances, not measured
		if code := send("PUT", fmt.Sprintf("/dav/c/m%d", i), "5", "first"); code != http.StatusNoContent {
			t.Fatalf("first PUT of m%d: %d", i, code)
		}
	}
	rt0, w0 := f.RoundTrips(), f.WaitedRoundTrips()
	for i := range writes {
		path := fmt.Sprintf("/dav/c/m%d", i%keys)
		if code := send("PUT", path, "5", fmt.Sprint("write ", i)); code != http.StatusNoContent {
			t.Fatalf("PUT %s with the repeated token: %d", path, code)
		}
	}
	waited, all := f.WaitedRoundTrips()-w0, f.RoundTrips()-rt0
	if waited != writes {
		t.Errorf("%d writes with a repeated token on a {path} route waited for %d round trips; want %d (one each)", writes, waited, writes)
	}
	// A heartbeat or an idle marker's unlock may fall in the loop.
	if all > writes+2 {
		t.Errorf("%d writes with a repeated token on a {path} route made %d round trips; want at most %d", writes, all, writes+2)
	}
	for i := range keys {
		path := fmt.Sprintf("/dav/c/m%d", i)
		if got, _ := up.file(path); got != fmt.Sprint("write ", writes-keys+i) {
			t.Errorf("upstream holds %q at %s; want the last write", got, path)
		}
	}

	// The collection deleted with a newer token: its tree key's fence row
	// stands at 9, and a member write with 5 is refused on the row the
	// marker's pipeline read.
	if code := send("DELETE", "/dav/c", "9", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE of the collection with 9: %d", code)
	}
	var tree int64
	if err := st.Pool.QueryRow(context.Background(), `SELECT highest FROM fence WHERE resource = '/dav/c/'`).Scan(&tree); err != nil || tree != 9 {
		t.Fatalf("tree key /dav/c/ after the DELETE: %d, %v; want 9", tree, err)
	}
	if code := send("PUT", "/dav/c/m0", "5", "late"); code != http.StatusConflict {
		t.Fatalf("member PUT with 5 after the collection's DELETE with 9: %d; want 409", code)
	}
	if got, _ := up.file("/dav/c/m0"); got == "late" {
		t.Fatalf("the stale member write reached the upstream")
	}
}

// TestMarkerScopeReadProbesKeys: the marker pipeline's read of a
// hierarchical write's rows keeps probing the tables' primary keys after
// they grew under a plan cached while they were empty (a marker session
// lives long, and every write of its replica waits for its reads): no
// sequential scan, whatever the statistics said when it was planned.
func TestMarkerScopeReadProbesKeys(t *testing.T) {
	st := openFenceStore(t, testenv.Postgres(t).URL, Options{MaxConns: 2})
	ctx := context.Background()
	conn, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The plan a long-lived session ends up with: generic, made on the
	// statistics of the moment (here: empty tables).
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE scope_read(text[]) AS `+markerScopeReadSQL); err != nil {
		t.Fatal(err)
	}
	const execute = `EXECUTE scope_read('{/,/t,/t/d,/t/d/1,/t/d/2}')`
	if _, err := conn.Exec(ctx, execute); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO fence (resource, highest, ready, owner) SELECT '/t/d/' || g, 1, true, 'w' FROM generate_series(1, 20000) g`,
		`INSERT INTO fence_below (resource, below, ready, known) SELECT '/t/d/' || g || '/', 1, true, true FROM generate_series(1, 5000) g`,
	} {
		if _, err := st.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var plan []string
	rows, err := conn.Query(ctx, `EXPLAIN (COSTS OFF) `+execute)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); strings.Contains(p, "Seq Scan") || !strings.Contains(p, "fence_pkey") || !strings.Contains(p, "fence_below_pkey") {
		t.Fatalf("the marker's scope read scans its tables instead of probing their keys:\n%s", p)
	}
}
