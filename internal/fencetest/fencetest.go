// Package fencetest is the contract suite every gateway.Fence must pass:
// admission, advance, drain, refusal and restart semantics of
// docs/design.md §2–§4. A fence package runs it with its own constructor:
//
//	func TestFenceContract(t *testing.T) {
//		fencetest.Run(t, func(t *testing.T) fencetest.Open { ... })
//	}
package fencetest

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
)

// Open starts one gateway's fence over the durable state of one test (a
// process starting): it returns the fence and a function that stops it (the
// process exiting). Shared fences may be open several times at once (as
// replicas); local ones are opened again only after the previous one
// stopped.
type Open func(t *testing.T) (gateway.Fence, func())

// Options say what the fence under test can do.
type Options struct {
	// Replicas: the fence may be open several times at once over one state
	// (fence mode shared); the suite then also runs across replicas.
	Replicas bool
}

// Run runs the suite; newState is called once per subtest and returns the
// Open of a fresh durable state.
func Run(t *testing.T, opts Options, newState func(t *testing.T) Open) {
	t.Run("Decisions", func(t *testing.T) { testDecisions(t, newState(t), opts) })
	t.Run("DrainWaitsForOlder", func(t *testing.T) { testDrain(t, newState(t), opts) })
	t.Run("DrainTimeout", func(t *testing.T) { testDrainTimeout(t, newState(t)) })
	t.Run("AdvanceByHand", func(t *testing.T) { testAdvance(t, newState(t), opts) })
	t.Run("Restart", func(t *testing.T) { testRestart(t, newState(t)) })
	t.Run("ConcurrentSameToken", func(t *testing.T) { testConcurrent(t, newState(t)) })
	t.Run("Randomized", func(t *testing.T) { testRandomized(t, newState(t), opts) })
	t.Run("InFlight", func(t *testing.T) { testInFlight(t, newState(t), opts) })
}

// inFlighter is the optional ability of a fence to count the writes it has
// in flight per resource (the operator console's fences list).
type inFlighter interface {
	InFlight(resource string) int
}

// Code is the refusal code of err, "admitted" for nil.
func Code(err error) string {
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

// fences opens n replicas (1 if the fence has none).
func fences(t *testing.T, open Open, opts Options, n int) []gateway.Fence {
	if !opts.Replicas {
		n = 1
	}
	var fs []gateway.Fence
	for range n {
		f, stop := open(t)
		t.Cleanup(stop)
		fs = append(fs, f)
	}
	return fs
}

func admit(t *testing.T, f gateway.Fence, resource string, token int64) gateway.Permit {
	t.Helper()
	p, err := f.Admit(context.Background(), gateway.Write{Resource: resource, Token: token, Owner: "w"})
	if err != nil {
		t.Fatalf("admit %s@%d: %v", resource, token, err)
	}
	return p
}

func testDecisions(t *testing.T, open Open, opts Options) {
	fs := fences(t, open, opts, 2)
	other := fs[len(fs)-1]
	ctx := context.Background()
	if st, err := fs[0].State(ctx, "/d"); err != nil || st.Highest != 0 || !st.Ready {
		t.Fatalf("state of an unknown resource: %+v, %v; want highest 0, ready", st, err)
	}
	steps := []struct {
		f     gateway.Fence
		token int64
		want  string
	}{
		{fs[0], 5, "admitted"},               // new resource
		{other, 5, "admitted"},               // repeated
		{fs[0], 5, "admitted"},               // repeated again
		{other, 4, fencegate.CodeStaleToken}, // older
		{fs[0], 7, "admitted"},               // advance
		{other, 5, fencegate.CodeStaleToken}, // older than the advance
		{other, 6, fencegate.CodeStaleToken}, // never accepted, still older
		{other, 7, "admitted"},               // repeated after the advance
		{fs[0], 1 << 62, "admitted"},         // large but valid
		{other, 1<<62 - 1, fencegate.CodeStaleToken},
	}
	for i, s := range steps {
		p, err := s.f.Admit(ctx, gateway.Write{Resource: "/d", Token: s.token, Owner: "w"})
		if got := Code(err); got != s.want {
			t.Fatalf("step %d: token %d: got %s; want %s", i, s.token, got, s.want)
		}
		if err == nil {
			p.Release()
			continue
		}
		var fe *fencegate.Error
		if errors.As(err, &fe) && (httprefusal.Status(fe) != http.StatusConflict || fe.Highest <= s.token || fe.Resource != "/d") {
			t.Fatalf("step %d: stale refusal %+v; want 409 naming the resource and a higher token", i, fe)
		}
	}
	st, err := other.State(ctx, "/d")
	if err != nil || st.Highest != 1<<62 {
		t.Fatalf("state = %+v, %v; want highest %d", st, err, int64(1<<62))
	}
}

// testDrain: a write in flight holds back a newer token until it is
// released (I2), and the older token is refused from the moment of the
// advance (I1).
func testDrain(t *testing.T, open Open, opts Options) {
	fs := fences(t, open, opts, 2)
	r1, r2 := fs[0], fs[len(fs)-1]
	old := admit(t, r1, "/a", 1)
	defer old.Release()
	var released atomic.Bool
	done := make(chan error, 1)
	go func() {
		p, err := r2.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 2, DrainTimeout: 20 * time.Second})
		if err == nil {
			if !released.Load() {
				err = errors.New("token 2 admitted while token 1 was in flight")
			}
			p.Release()
		}
		done <- err
	}()
	waitFor(t, func() bool { st, _ := r1.State(context.Background(), "/a"); return st.Highest == 2 })
	if _, err := r1.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 1}); Code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 1 after the advance: %v; want stale", err)
	}
	time.Sleep(100 * time.Millisecond) // give a broken drain the chance to admit early
	released.Store(true)
	old.Release()
	if err := <-done; err != nil {
		t.Fatalf("token 2: %v", err)
	}
}

func testDrainTimeout(t *testing.T, open Open) {
	f, stop := open(t)
	defer stop()
	old := admit(t, f, "/t", 1)
	defer old.Release()
	_, err := f.Admit(context.Background(), gateway.Write{Resource: "/t", Token: 2, DrainTimeout: 200 * time.Millisecond})
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeFenceDraining || httprefusal.Status(fe) != http.StatusServiceUnavailable || fe.RetryAfter <= 0 {
		t.Fatalf("token 2 with token 1 in flight: %v; want 503 fence_draining with Retry-After", err)
	}
	// The advance stays.
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "/t", Token: 1}); Code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 1 after the advance: %v; want stale", err)
	}
	old.Release()
	admit(t, f, "/t", 2).Release()
}

// testAdvance: an operator's (or the coordinator's) raise refuses older
// tokens at once, and never lowers a fence (I7).
func testAdvance(t *testing.T, open Open, opts Options) {
	fs := fences(t, open, opts, 2)
	ctx := context.Background()
	admit(t, fs[0], "/h", 3).Release()
	st, err := fs[0].Advance(ctx, "/h", 9, "op")
	if err != nil || st.Highest != 9 {
		t.Fatalf("advance to 9: %+v, %v", st, err)
	}
	for _, f := range fs {
		if _, err := f.Admit(ctx, gateway.Write{Resource: "/h", Token: 3}); Code(err) != fencegate.CodeStaleToken {
			t.Fatalf("token 3 after the raise to 9: %v; want stale", err)
		}
	}
	if st, err := fs[len(fs)-1].Advance(ctx, "/h", 4, "op"); err != nil || st.Highest != 9 {
		t.Fatalf("advance to 4 after 9: %+v, %v; want highest 9 kept", st, err)
	}
	admit(t, fs[len(fs)-1], "/h", 9).Release()
	admit(t, fs[0], "/h", 9).Release()
}

// testInFlight: a fence that counts its writes in flight counts each
// admitted write of the resource until it is released, its own only (not
// another replica's, not another resource's), and none after an advance
// has drained them.
func testInFlight(t *testing.T, open Open, opts Options) {
	fs := fences(t, open, opts, 2)
	c, ok := fs[0].(inFlighter)
	if !ok {
		t.Skipf("%T does not count writes in flight", fs[0])
	}
	count := func(res string, want int) {
		t.Helper()
		if got := c.InFlight(res); got != want {
			t.Fatalf("InFlight(%s) = %d; want %d", res, got, want)
		}
	}
	count("/n", 0)
	p1, p2 := admit(t, fs[0], "/n", 5), admit(t, fs[0], "/n", 5)
	other := admit(t, fs[0], "/n2", 1)
	count("/n", 2)
	count("/n2", 1)
	if len(fs) > 1 {
		theirs := admit(t, fs[1], "/n", 5)
		count("/n", 2)
		theirs.Release()
	}
	p1.Release()
	count("/n", 1)
	p2.Release()
	p2.Release() // a second Release changes nothing
	count("/n", 0)
	other.Release()
	count("/n2", 0)
}

// testRestart: the fence a stopped gateway accepted is kept by the next
// one (I1 across restarts).
func testRestart(t *testing.T, open Open) {
	f, stop := open(t)
	admit(t, f, "/r", 41).Release()
	admit(t, f, "/r", 42).Release()
	stop()
	f, stop = open(t)
	defer stop()
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "/r", Token: 41}); Code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 41 after the restart: %v; want stale", err)
	}
	admit(t, f, "/r", 42).Release()
	admit(t, f, "/r", 43).Release()
}

// testConcurrent: many writers of one new token at once are all admitted.
func testConcurrent(t *testing.T, open Open) {
	f, stop := open(t)
	defer stop()
	admit(t, f, "/c", 1).Release()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			p, err := f.Admit(context.Background(), gateway.Write{Resource: "/c", Token: 2, DrainTimeout: 10 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Millisecond)
			p.Release()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("same-token writer: %v", err)
	}
}

// testRandomized: writers with random tokens; the "upstream" (applied while
// the permit is held) never sees a token lower than one applied before, and
// never two tokens of one resource in flight at once.
func testRandomized(t *testing.T, open Open, opts Options) {
	fs := fences(t, open, opts, 3)
	var mu sync.Mutex
	last := map[string]int64{}
	inflight := map[string]map[int64]int{}
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	var admitted, refused atomic.Int64
	for w := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for time.Now().Before(deadline) {
				res := fmt.Sprintf("/x/%d", rng.IntN(3))
				tok := int64(rng.IntN(20) + 1)
				p, err := fs[rng.IntN(len(fs))].Admit(context.Background(), gateway.Write{Resource: res, Token: tok, DrainTimeout: 5 * time.Second})
				if err != nil {
					if Code(err) != fencegate.CodeStaleToken {
						t.Errorf("%s@%d: %v", res, tok, err)
						return
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				mu.Lock()
				if tok < last[res] {
					t.Errorf("%s: token %d applied after %d", res, tok, last[res])
				}
				for other := range inflight[res] {
					if other != tok {
						t.Errorf("%s: token %d admitted while %d in flight", res, tok, other)
					}
				}
				last[res] = tok
				if inflight[res] == nil {
					inflight[res] = map[int64]int{}
				}
				inflight[res][tok]++
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(2)) * time.Millisecond)
				mu.Lock()
				if inflight[res][tok]--; inflight[res][tok] == 0 {
					delete(inflight[res], tok)
				}
				mu.Unlock()
				p.Release()
			}
		})
	}
	wg.Wait()
	if admitted.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("admitted %d, refused %d: the run did not exercise both paths", admitted.Load(), refused.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
