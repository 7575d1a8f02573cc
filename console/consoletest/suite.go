// Package consoletest is the contract of the console's listings, run
// against every store (adapters/bolt, adapters/postgres).
package consoletest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/console"
)

// Store is what the suite needs of a store.
type Store interface {
	console.FenceLister
	AdvanceFence(ctx context.Context, resource string, token int64, owner string) (fencegate.FenceState, error)
}

// Seed creates fences for resources at token 1 quickly (one transaction):
// the suite needs thousands.
type Seed func(t *testing.T, resources []string)

// RunFenceLister runs the listing contract on a fresh, empty store.
func RunFenceLister(t *testing.T, st Store, seed Seed) {
	ctx := context.Background()
	t.Run("Empty", func(t *testing.T) {
		got, err := st.ListFences(ctx, "/nothing/", "", 10)
		if err != nil || len(got) != 0 {
			t.Fatalf("ListFences on nothing = %v, %v; want none", got, err)
		}
	})
	t.Run("PrefixAndCursor", func(t *testing.T) {
		for i, r := range []string{"/a/1", "/a/2", "/a/3", "/ab", "/b/1", "/a"} {
			if _, err := st.AdvanceFence(ctx, r, int64(10+i), "w"); err != nil {
				t.Fatal(err)
			}
		}
		got := all(t, st, "/a/", 2)
		if fmt.Sprint(got) != "[/a/1 /a/2 /a/3]" {
			t.Fatalf("prefix /a/ in pages of 2 = %v; want [/a/1 /a/2 /a/3]", got)
		}
		page, err := st.ListFences(ctx, "/a/", "/a/1", 10)
		if err != nil || len(page) != 2 || page[0].Resource != "/a/2" || page[0].Highest != 11 || page[0].Owner != "w" {
			t.Fatalf("after /a/1 = %+v, %v; want /a/2 (11, w) and /a/3", page, err)
		}
		// A cursor outside the prefix: before it starts at the prefix,
		// after it yields nothing.
		if p, _ := st.ListFences(ctx, "/a/", "/", 10); len(p) != 3 {
			t.Errorf("after / with prefix /a/ = %d records; want 3", len(p))
		}
		if p, _ := st.ListFences(ctx, "/a/", "/b", 10); len(p) != 0 {
			t.Errorf("after /b with prefix /a/ = %v; want none", p)
		}
		if got := all(t, st, "", 4); len(got) != 6 {
			t.Errorf("everything = %v; want 6 records", got)
		}
	})
	t.Run("Hostile", func(t *testing.T) {
		// Keys are user input: quotes, percent, underscore and backslash
		// are data, never pattern syntax.
		keys := []string{`/h/<script>alert("x")</script>`, `/h/%`, `/h/_`, `/h/\`, `/h/'; DROP TABLE fence; --`}
		for _, k := range keys {
			if _, err := st.AdvanceFence(ctx, k, 5, `"><img src=x onerror=alert(1)>`); err != nil {
				t.Fatal(err)
			}
		}
		if got := all(t, st, "/h/", 2); len(got) != len(keys) {
			t.Fatalf("/h/ = %q; want the %d hostile keys", got, len(keys))
		}
		if got := all(t, st, "/h/%", 10); len(got) != 1 {
			t.Errorf("prefix /h/%% = %q; want exactly /h/%% (no LIKE wildcard)", got)
		}
		if got := all(t, st, "/h/_", 10); len(got) != 1 {
			t.Errorf("prefix /h/_ = %q; want exactly /h/_", got)
		}
	})
	t.Run("ConcurrentAdvances", func(t *testing.T) {
		// 10,000 fences paged through while every one of them keeps
		// advancing and new ones appear: every resource that existed
		// when the listing started comes back exactly once.
		const n = 10000
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("/bulk/%05d", i)
		}
		seed(t, keys)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var advances atomic.Int64
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for tok := int64(2); ; tok++ {
					select {
					case <-stop:
						return
					default:
					}
					k := keys[rng.IntN(n)]
					if w == 0 {
						k = fmt.Sprintf("/bulk/new-%d", tok) // new resources
					}
					if _, err := st.AdvanceFence(ctx, k, tok, "racer"); err != nil {
						t.Error(err)
						return
					}
					advances.Add(1)
				}
			}()
		}
		seen := map[string]int{}
		after, pages := "", 0
		for {
			page, err := st.ListFences(ctx, "/bulk/", after, 700)
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatal(err)
			}
			pages++
			for _, f := range page {
				seen[f.Resource]++
			}
			if len(page) < 700 {
				break
			}
			// Let the advancers move between any two pages.
			for want := advances.Load() + 20; advances.Load() < want && !t.Failed(); {
				runtime.Gosched()
			}
			after = page[len(page)-1].Resource
		}
		close(stop)
		wg.Wait()
		for _, k := range keys {
			if seen[k] != 1 {
				t.Fatalf("%s listed %d times; want exactly once", k, seen[k])
			}
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("%s listed %d times", k, c)
			}
		}
		t.Logf("%d pages, %d resources, %d concurrent advances", pages, len(seen), advances.Load())
	})
	t.Run("PageBound", func(t *testing.T) {
		// Asking for more than a page gets one page: memory is bounded
		// by the store, not by the caller.
		page, err := st.ListFences(ctx, "/bulk/", "", 1<<30)
		if err != nil || len(page) != console.MaxLimit {
			t.Fatalf("limit 2^30 = %d records, %v; want %d", len(page), err, console.MaxLimit)
		}
	})
}

func all(t *testing.T, st Store, prefix string, limit int) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page, err := st.ListFences(context.Background(), prefix, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page {
			out = append(out, f.Resource)
		}
		if len(page) < limit {
			return out
		}
		after = page[len(page)-1].Resource
	}
}
