package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/internal/fencetest"
	"github.com/fencegate/fencegate/internal/testenv"
)

func openFenceStore(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	st, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// replicas returns n shared fences over one fresh database, each with a
// pool of its own, as n gateway processes would have.
func replicas(t testing.TB, n int, opts SharedFenceOptions) ([]*SharedFence, *Store) {
	t.Helper()
	pg := testenv.Postgres(t)
	var fs []*SharedFence
	var first *Store
	for i := range n {
		st := openFenceStore(t, pg.URL, Options{MaxConns: 16})
		if i == 0 {
			first = st
		}
		fs = append(fs, newShared(t, st, opts))
	}
	return fs, first
}

// newShared opens a shared fence over st, closed at the end of the test
// (before st, whose cleanup was registered first).
func newShared(t testing.TB, st *Store, opts SharedFenceOptions) *SharedFence {
	t.Helper()
	f := NewSharedFence(st, opts)
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Ready(ctx); err != nil {
		t.Fatalf("shared fence: %v", err)
	}
	return f
}

// TestFenceContract runs the suite of every fence over PostgreSQL: the
// shared fence (as several replicas, each with its own pool) and the local
// fence over the PostgreSQL store.
func TestFenceContract(t *testing.T) {
	t.Run("shared", func(t *testing.T) {
		fencetest.Run(t, fencetest.Options{Replicas: true}, func(t *testing.T) fencetest.Open {
			url := testenv.Postgres(t).URL
			return func(t *testing.T) (gateway.Fence, func()) {
				st, err := Open(context.Background(), url, Options{MaxConns: 4})
				if err != nil {
					t.Fatal(err)
				}
				f := NewSharedFence(st, SharedFenceOptions{ForwardTimeout: 2 * time.Second})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := f.Ready(ctx); err != nil {
					t.Fatal(err)
				}
				var once sync.Once
				return f, func() { once.Do(func() { f.Close(); st.Close() }) }
			}
		})
	})
	t.Run("local", func(t *testing.T) {
		fencetest.Run(t, fencetest.Options{}, func(t *testing.T) fencetest.Open {
			url := testenv.Postgres(t).URL
			return func(t *testing.T) (gateway.Fence, func()) {
				st, err := Open(context.Background(), url, Options{MaxConns: 4})
				if err != nil {
					t.Fatal(err)
				}
				var once sync.Once
				return gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), func() { once.Do(func() { st.Close() }) }
			}
		})
	})
}

func code(err error) string {
	if fe, ok := fencegate.Refusal(err); ok {
		return fe.Code
	}
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

func mustAdmit(t testing.TB, f gateway.Fence, resource string, token int64) gateway.Permit {
	t.Helper()
	p, err := f.Admit(context.Background(), gateway.Write{Resource: resource, Token: token})
	if err != nil {
		t.Fatalf("admit %s@%d: %v", resource, token, err)
	}
	return p
}

func TestSharedFenceDecisions(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{})
	r1, r2 := fs[0], fs[1]
	ctx := context.Background()
	steps := []struct {
		f     *SharedFence
		token int64
		want  string
	}{
		{r1, 5, "admitted"},               // new resource
		{r2, 5, "admitted"},               // repeated, other replica
		{r2, 4, fencegate.CodeStaleToken}, // older, other replica
		{r1, 7, "admitted"},               // advance
		{r2, 5, fencegate.CodeStaleToken}, // older than the advance
		{r2, 6, fencegate.CodeStaleToken}, // between: never accepted, still older
		{r2, 7, "admitted"},               // repeated after the advance
		{r1, 1 << 62, "admitted"},         // large but valid
		{r2, 1<<62 - 1, fencegate.CodeStaleToken},
	}
	for i, s := range steps {
		p, err := s.f.Admit(ctx, gateway.Write{Resource: "/orders/1", Token: s.token, Owner: "w"})
		if got := code(err); got != s.want {
			t.Fatalf("step %d: token %d: got %s; want %s", i, s.token, got, s.want)
		}
		if err == nil {
			p.Release()
		}
		var fe *fencegate.Error
		if errors.As(err, &fe) && fe.Code == fencegate.CodeStaleToken && httprefusal.Status(fe) != http.StatusConflict {
			t.Fatalf("step %d: stale status %d; want 409", i, httprefusal.Status(fe))
		}
	}
	st, err := r2.State(ctx, "/orders/1")
	if err != nil || st.Highest != 1<<62 || !st.Ready {
		t.Fatalf("state = %+v, %v; want highest %d ready", st, err, int64(1<<62))
	}
}

// TestSharedFenceDrainAcrossReplicas: a write in flight through one replica
// holds back a newer token through the other until it is released (I2),
// and the older token is refused from the moment of the advance.
func TestSharedFenceDrainAcrossReplicas(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{})
	r1, r2 := fs[0], fs[1]
	old := mustAdmit(t, r1, "/a", 1)
	defer old.Release() // on failure too: the pool's Close waits for it

	var seq atomic.Int64
	var releasedAt, admittedAt atomic.Int64
	done := make(chan error, 1)
	go func() {
		p, err := r2.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 2})
		admittedAt.Store(seq.Add(1))
		if err == nil {
			p.Release()
		}
		done <- err
	}()
	// The advance is committed before the drain starts waiting: an older
	// writer arriving now is refused, on either replica.
	waitFor(t, func() bool {
		st, _ := r1.State(context.Background(), "/a")
		return st.Highest == 2
	})
	if _, err := r1.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 1}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 1 after the advance: %v; want stale", err)
	}
	time.Sleep(200 * time.Millisecond) // give a broken drain the chance to admit early
	releasedAt.Store(seq.Add(1))
	old.Release()
	if err := <-done; err != nil {
		t.Fatalf("token 2: %v", err)
	}
	if admittedAt.Load() < releasedAt.Load() {
		t.Fatalf("token 2 was admitted (seq %d) before token 1 was released (seq %d)", admittedAt.Load(), releasedAt.Load())
	}
}

func TestSharedFenceDrainTimeout(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{})
	r1, r2 := fs[0], fs[1]
	old := mustAdmit(t, r1, "/a", 1)
	defer old.Release() // on failure too: the pool's Close waits for it
	_, err := r2.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 2, DrainTimeout: 300 * time.Millisecond})
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeFenceDraining || httprefusal.Status(fe) != http.StatusServiceUnavailable {
		t.Fatalf("token 2 with token 1 in flight: %v; want 503 fence_draining", err)
	}
	// The advance stays: token 1 is refused even though 2 was not admitted.
	if _, err := r2.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 1}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 1 after the advance: %v; want stale", err)
	}
	old.Release()
	mustAdmit(t, r2, "/a", 2).Release()
}

// TestSharedFenceConcurrentSameToken: writers of one new token on both
// replicas, all at once (seed test 6): all admitted, none waits forever for
// the others' drains.
func TestSharedFenceConcurrentSameToken(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{})
	mustAdmit(t, fs[0], "/c", 1).Release()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			p, err := fs[i%2].Admit(context.Background(), gateway.Write{Resource: "/c", Token: 2, DrainTimeout: 10 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			p.Release()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("same-token writer: %v", err)
	}
}

// TestSharedFenceStaleStreamDoesNotStarveAdvance is the case docs/design.md
// section 4 warns about: with "SELECT .. FOR SHARE" + "UPDATE", a stream of
// lockers is granted ahead of the waiting UPDATE and the advance starves.
// Here sixteen writers keep token 1 in flight on both replicas without a
// pause; the advance to 2 must still complete within its drain timeout,
// and every token-1 write that starts after it is refused.
func TestSharedFenceStaleStreamDoesNotStarveAdvance(t *testing.T) {
	fs, _ := replicas(t, 2, SharedFenceOptions{})
	mustAdmit(t, fs[0], "/s", 1).Release()
	stop := make(chan struct{})
	var advanced atomic.Bool
	var wg sync.WaitGroup
	var admittedAfter atomic.Int64
	for i := range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				after := advanced.Load()
				p, err := fs[i%2].Admit(context.Background(), gateway.Write{Resource: "/s", Token: 1})
				if err != nil {
					if code(err) != fencegate.CodeStaleToken {
						t.Errorf("token 1: %v", err)
						return
					}
					continue
				}
				if after {
					admittedAfter.Add(1)
				}
				time.Sleep(time.Millisecond) // in flight
				p.Release()
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the stream is running
	p, err := fs[1].Admit(context.Background(), gateway.Write{Resource: "/s", Token: 2, DrainTimeout: 10 * time.Second})
	advanced.Store(true)
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("advance to 2 under a stream of token-1 writes: %v", err)
	}
	p.Release()
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := admittedAfter.Load(); n > 0 {
		t.Fatalf("%d token-1 writes admitted after token 2 was", n)
	}
}

// TestKeyShareReturnsSupersededRow documents the PostgreSQL behaviour that
// makes the marker read the row again after locking it: a FOR KEY SHARE
// whose snapshot predates a committed non-key update locks the row without
// following the update and returns the old version. A marker deciding on
// that row would admit token 1 after token 2's advance and drain finished.
func TestKeyShareReturnsSupersededRow(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	ctx := context.Background()
	if _, err := st.AdvanceFence(ctx, "/k", 1, ""); err != nil {
		t.Fatal(err)
	}
	type res struct {
		highest int64
		err     error
	}
	got := make(chan res, 1)
	go func() {
		// The statement takes its snapshot, then pg_sleep delays it between
		// reading the row and locking it.
		var h int64
		err := st.Pool.QueryRow(ctx, `SELECT highest FROM fence WHERE resource = $1 AND pg_sleep(0.5) IS NOT NULL FOR KEY SHARE`, "/k").Scan(&h)
		got <- res{h, err}
	}()
	time.Sleep(150 * time.Millisecond)
	if _, err := st.AdvanceFence(ctx, "/k", 2, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, drainReadySQL, "/k", int64(2)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.highest != 1 {
		t.Skipf("this PostgreSQL returned the current row (highest %d); the re-read is then redundant but harmless", r.highest)
	}
	var cur int64
	if err := st.Pool.QueryRow(ctx, markerReadSQL, []string{"/k"}).Scan(new(string), &cur, new(bool)); err != nil || cur != 2 {
		t.Fatalf("re-read: %d, %v; want 2", cur, err)
	}
}

// TestSharedFenceRandomized runs writers with random tokens through three
// replicas and checks, at the "upstream" (applied while the permit is held),
// that no resource ever applies a token lower than one applied before.
func TestSharedFenceRandomized(t *testing.T) {
	fs, _ := replicas(t, 3, SharedFenceOptions{})
	var mu sync.Mutex
	hist := map[string][]int64{}
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var admitted, refused atomic.Int64
	for w := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for time.Now().Before(deadline) {
				res := fmt.Sprintf("/r/%d", rng.IntN(3))
				tok := int64(rng.IntN(20) + 1)
				p, err := fs[rng.IntN(len(fs))].Admit(context.Background(), gateway.Write{Resource: res, Token: tok, DrainTimeout: 5 * time.Second})
				if err != nil {
					if c := code(err); c != fencegate.CodeStaleToken {
						t.Errorf("%s@%d: %v", res, tok, err)
						return
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // in flight
				mu.Lock()
				hist[res] = append(hist[res], tok)
				mu.Unlock()
				p.Release()
			}
		})
	}
	wg.Wait()
	for res, h := range hist {
		for i := 1; i < len(h); i++ {
			if h[i] < h[i-1] {
				t.Fatalf("%s applied %d after %d: %v", res, h[i], h[i-1], h)
			}
		}
	}
	if admitted.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("admitted %d, refused %d: the run did not exercise both paths", admitted.Load(), refused.Load())
	}
	t.Logf("admitted %d, refused %d", admitted.Load(), refused.Load())
}

// TestSharedFenceRoundTrips: a repeated token costs one round trip on the
// critical path (the marker's try-lock and re-read, one pipeline) and its
// unlock goes out after the write, with the session's next pipeline; an
// advance costs the advance-and-drain pipeline on the pool more.
func TestSharedFenceRoundTrips(t *testing.T) {
	fs, _ := replicas(t, 1, SharedFenceOptions{MarkerConns: 1})
	f := fs[0]
	mustAdmit(t, f, "/warm", 1).Release()
	mustAdmit(t, f, "/warm", 2).Release()
	cases := []struct {
		name     string
		token    int64
		critical int64 // before Admit returns
	}{
		{"new resource", 1, 3}, // marker (no row), advance, marker
		{"repeated token", 1, 1},
		{"advance", 2, 3}, // marker (older), advance and drain, marker
		{"repeated after advance", 2, 1},
		{"stale", 1, 1}, // a marker and a read, refused
	}
	for _, c := range cases {
		before := f.WaitedRoundTrips()
		p, err := f.Admit(context.Background(), gateway.Write{Resource: "/rt", Token: c.token})
		got := f.WaitedRoundTrips() - before
		if err == nil {
			p.Release()
		}
		if got != c.critical {
			t.Errorf("%s: %d round trips before the decision; want %d", c.name, got, c.critical)
		}
		waitFor(t, func() bool { // the unlock went out
			f.lanes[0].mu.Lock()
			defer f.lanes[0].mu.Unlock()
			s := f.lanes[0].sess
			return s != nil && len(s.queue) == 0 && len(s.entries) == 0
		})
	}
	// A write joining a marker its session holds: one round trip.
	hold := mustAdmit(t, f, "/rt", 2)
	before := f.WaitedRoundTrips()
	mustAdmit(t, f, "/rt", 2).Release()
	if got := f.WaitedRoundTrips() - before; got != 1 {
		t.Errorf("joining a held marker: %d round trips; want 1", got)
	}
	// A stale write while the marker of a newer token is held: no I/O.
	before = f.RoundTrips()
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "/rt", Token: 1}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 1 under a held marker of 2: %v", err)
	}
	if got := f.RoundTrips() - before; got != 0 {
		t.Errorf("stale under a held marker: %d round trips; want 0", got)
	}
	hold.Release()
}

func TestSharedFenceVerify(t *testing.T) {
	var calls atomic.Int64
	verify := func(ctx context.Context, resource string, token int64) error {
		calls.Add(1)
		if token > 10 {
			return &fencegate.Error{Code: fencegate.CodeUnknownToken, Resource: resource, Token: token, Highest: 10}
		}
		return nil
	}
	fs, _ := replicas(t, 1, SharedFenceOptions{Verify: verify})
	f := fs[0]
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "/v", Token: 1 << 40}); code(err) != fencegate.CodeUnknownToken {
		t.Fatalf("forged token: %v; want unknown_fencing_token", err)
	}
	mustAdmit(t, f, "/v", 3).Release()
	mustAdmit(t, f, "/v", 3).Release()
	mustAdmit(t, f, "/v", 3).Release()
	if n := calls.Load(); n != 2 {
		t.Fatalf("verify called %d times; want 2 (the forged token and the one advance)", n)
	}
	st, _ := f.State(context.Background(), "/v")
	if st.Highest != 3 {
		t.Fatalf("highest %d; want 3 (the refused token must not raise the fence)", st.Highest)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
