package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
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

// TestSharedHierarchicalFence: across two replicas, a collection write is
// refused after a newer member write (also one written before the key was
// ever checked as a collection: the scan), a member write after a newer
// collection write, at any depth; siblings of other owners and the
// collection's own token stay free.
func TestSharedHierarchicalFence(t *testing.T) {
	fs, st := replicas(t, 2, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	r1, r2 := fs[0], fs[1]
	p, err := admitTree(r1, "/dav/coll/m", 9)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	p, err = admitTree(r2, "/dav/coll/other", 3)
	if err != nil {
		t.Fatalf("sibling with an older token: %v", err)
	}
	p.Release()
	for _, key := range []string{"/dav/coll", "/dav"} {
		if _, err := admitTree(r2, key, 3); refusalCode(err) != fencegate.CodeStaleToken {
			t.Fatalf("collection %s with token 3 after member 9 on the other replica: %v; want stale", key, err)
		}
		if _, err := admitTree(r2, key, 8); refusalCode(err) != fencegate.CodeStaleToken {
			t.Fatalf("collection %s with token 8 after member 9: %v; want stale", key, err)
		}
	}

	// A member row written with no hierarchy (another route, or before
	// the upgrade): the collection's first write reads it.
	if _, err := st.AdvanceFence(context.Background(), "/old/c/m", 9, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := admitTree(r2, "/old/c", 3); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection with token 3 above a member row at 9 written without hierarchy: %v; want stale", err)
	}

	p, err = admitTree(r1, "/dav/coll", 10)
	if err != nil {
		t.Fatalf("collection with token 10: %v", err)
	}
	p.Release()
	if _, err := admitTree(r2, "/dav/coll/m", 9); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("member with token 9 after collection 10: %v; want stale", err)
	}
	if _, err := admitTree(r2, "/dav/coll/new/deep", 9); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("new deep member with token 9 after collection 10: %v; want stale", err)
	}
	// Above the collection, an older sibling tree stays free.
	p, err = admitTree(r2, "/dav/else", 4)
	if err != nil {
		t.Fatalf("sibling tree with token 4: %v", err)
	}
	p.Release()
	p, err = admitTree(r2, "/dav/coll/m", 10)
	if err != nil {
		t.Fatalf("member with the collection's token: %v", err)
	}
	p.Release()
	// A member written with a newer token on one replica: the
	// collection's token, accepted before, is now stale on the other
	// (no advance, no scan: the below level refuses it).
	p, err = admitTree(r1, "/dav/coll/m", 11)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if _, err := admitTree(r2, "/dav/coll", 10); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection with its own token 10 after member 11: %v; want stale", err)
	}
	// The repeated token on a hierarchical key: one round trip (the
	// marker's pipeline reads the rows around it), no scan, no wait.
	rt := r2.WaitedRoundTrips()
	p, err = admitTree(r2, "/dav/coll/m", 11)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if got := r2.WaitedRoundTrips() - rt; got != 1 {
		t.Fatalf("a repeated token's hierarchical write waited for %d round trips; want 1", got)
	}
}

// TestSharedHierarchicalDrain proves I2 across levels and replicas: a
// newer collection write waits for an older member write in flight on the
// other replica, and a newer member write for an older collection write.
func TestSharedHierarchicalDrain(t *testing.T) {
	// Generous: the machine may be loaded; the refusal below has its own.
	fs, _ := replicas(t, 2, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	r1, r2 := fs[0], fs[1]
	member, err := admitTree(r1, "/c/m", 5)
	if err != nil {
		t.Fatal(err)
	}
	short := gateway.Write{Resource: "/c", Token: 6, Scope: gateway.ScopeTree, DrainTimeout: 300 * time.Millisecond}
	if _, err := r2.AdmitTree(context.Background(), short, resource.Parents("/c")); refusalCode(err) != fencegate.CodeFenceDraining {
		t.Fatalf("collection 6 while member 5 in flight on the other replica: %v; want fence_draining", err)
	}
	member.Release()
	coll, err := admitTree(r2, "/c", 7)
	if err != nil {
		t.Fatalf("collection 7 after the member landed: %v", err)
	}
	if _, err := admitTree(r1, "/c/m", 6); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("member 6 after collection 7: %v; want stale", err)
	}
	awaitAdmitted(t, func() (gateway.Permit, error) { return admitTree(r1, "/c/m", 8) }, coll, "member 8 while collection 7 is in flight")

	// A newer collection write waits for a slow member write in flight.
	member, err = admitTree(r1, "/c/deep/m", 9)
	if err != nil {
		t.Fatal(err)
	}
	awaitAdmitted(t, func() (gateway.Permit, error) { return admitTree(r2, "/c", 10) }, member, "collection 10 while member 9 is in flight")

	// And for an older write of the collection itself.
	coll, err = admitTree(r2, "/c", 11)
	if err != nil {
		t.Fatal(err)
	}
	awaitAdmitted(t, func() (gateway.Permit, error) { return admitTree(r1, "/c", 12) }, coll, "collection 12 while collection 11 is in flight")
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

// TestSharedScanRaiseWaits: a collection's scan that raises its below
// level (here the scan of a collection write refused because a member
// advanced past it) leaves the level not ready. A member write between
// the collection's token and the new level must still wait for the
// collection's own write in flight, which that scan did not wait for.
func TestSharedScanRaiseWaits(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	r1, r2 := fs[0], fs[1]
	for _, w := range []struct {
		key string
		tok int64
	}{{"/s/m", 50}, {"/s", 58}} {
		p, err := admitTree(r1, w.key, w.tok)
		if err != nil {
			t.Fatalf("%s@%d: %v", w.key, w.tok, err)
		}
		p.Release()
	}
	// The member's own row advances first, as a member write's own-key
	// admission does before it reads the collections above it.
	p, err := r2.Admit(context.Background(), gateway.Write{Resource: "/s/m", Token: 60})
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	coll, err := admitTree(r1, "/s", 58)
	if err != nil {
		t.Fatalf("collection write with its own token: %v", err)
	}
	// Scans the members (60) and raises the below level of /s to 60.
	if _, err := admitTree(r2, "/s", 59); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection 59 after member 60: %v; want stale", err)
	}
	awaitAdmitted(t, func() (gateway.Permit, error) { return admitTree(r2, "/s/m", 60) }, coll, "member 60 while collection 58 is in flight")
}

// awaitAdmitted starts admit, checks that it is not admitted while held is
// in flight, releases held, and checks that it is admitted then.
func awaitAdmitted(t *testing.T, admit func() (gateway.Permit, error), held gateway.Permit, what string) {
	t.Helper()
	type result struct {
		p   gateway.Permit
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := admit()
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		if r.p != nil {
			r.p.Release()
		}
		t.Fatalf("%s: decided before it landed (%v)", what, r.err)
	case <-time.After(150 * time.Millisecond):
	}
	held.Release()
	r := <-done
	if r.err != nil {
		t.Fatalf("%s, after it landed: %v", what, r.err)
	}
	r.p.Release()
}

// TestSharedBucketScopes: an S3 route's scopes (an object write ScopeKey on
// its key and ScopeMember on the bucket's, a bucket write ScopeTree on the
// bucket's) across replicas; a ScopeMember admission alone is refused.
func TestSharedBucketScopes(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	ctx := context.Background()
	object := func(f *SharedFence, key string, tok int64) error {
		p, err := f.AdmitTree(ctx, gateway.Write{Resource: "b/" + key, Token: tok}, []string{"b"})
		if err == nil {
			p.Release()
		}
		return err
	}
	bucket := func(f *SharedFence, tok int64) error {
		p, err := f.Admit(ctx, gateway.Write{Resource: "b", Token: tok, Scope: gateway.ScopeTree})
		if err == nil {
			p.Release()
		}
		return err
	}
	if err := object(fs[0], "k", 9); err != nil {
		t.Fatal(err)
	}
	if err := bucket(fs[1], 8); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("bucket write 8 after object write 9: %v; want stale", err)
	}
	if err := bucket(fs[1], 12); err != nil {
		t.Fatalf("bucket write 12: %v", err)
	}
	if err := object(fs[0], "other", 11); refusalCode(err) != fencegate.CodeStaleToken {
		t.Fatalf("object write 11 after bucket write 12: %v; want stale", err)
	}
	if err := object(fs[0], "k", 12); err != nil {
		t.Fatalf("object write with the bucket's token: %v", err)
	}
	if _, err := fs[0].Admit(ctx, gateway.Write{Resource: "b", Token: 13, Scope: gateway.ScopeMember}); refusalCode(err) != fencegate.CodeFenceUnavailable {
		t.Fatalf("ScopeMember alone: %v; want fence_unavailable", err)
	}
}

// TestSharedHierarchicalRandom: writes of random keys of one small tree
// and random tokens, through two replicas, some held in flight a while.
// Checked at each admission: no write is admitted while an older write of
// a key above or below it (or its own) is in flight (I2), nor after a
// newer write of its own key or of a key above it, or, for a collection
// write, of a key below it (I1).
func TestSharedHierarchicalRandom(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	keys := []string{"/t", "/t/a", "/t/b", "/t/a/x", "/t/a/y"}
	related := func(a, b string) bool {
		return a == b || strings.HasPrefix(b, a+"/") || strings.HasPrefix(a, b+"/")
	}
	type flying struct {
		key string
		tok int64
	}
	var (
		mu       sync.Mutex
		inflight = map[*flying]bool{}
		accepted = map[string]int64{}
		base     atomic.Int64
		admitted atomic.Int64
	)
	base.Store(10)
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	for w := range 8 {
		f := fs[w%2]
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < 40 && time.Now().Before(deadline); i++ {
				if rnd.IntN(4) == 0 {
					base.Add(1)
				}
				key := keys[rnd.IntN(len(keys))]
				tok := base.Load() + int64(rnd.IntN(3)) - 1
				p, err := admitTree(f, key, tok)
				if err != nil {
					if c := refusalCode(err); c != fencegate.CodeStaleToken && c != fencegate.CodeFenceDraining {
						t.Errorf("%s@%d: %v", key, tok, err)
					}
					continue
				}
				admitted.Add(1)
				fl := &flying{key, tok}
				mu.Lock()
				for o := range inflight {
					if related(o.key, key) && o.tok < tok {
						t.Errorf("%s@%d admitted while %s@%d is in flight", key, tok, o.key, o.tok)
					}
				}
				for k, h := range accepted {
					above := strings.HasPrefix(key, k+"/")
					if (k == key || above || strings.HasPrefix(k, key+"/")) && h > tok {
						t.Errorf("%s@%d admitted after %s@%d", key, tok, k, h)
					}
				}
				accepted[key] = max(accepted[key], tok)
				inflight[fl] = true
				mu.Unlock()
				time.Sleep(time.Duration(rnd.IntN(10000)) * time.Microsecond)
				mu.Lock()
				delete(inflight, fl)
				mu.Unlock()
				p.Release()
			}
		})
	}
	wg.Wait()
	if admitted.Load() < 40 {
		t.Fatalf("only %d writes admitted", admitted.Load())
	}
	t.Logf("%d writes admitted", admitted.Load())
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
