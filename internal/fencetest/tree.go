package fencetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/resource"
)

// RunTree runs the hierarchical-keys suite (gateway.Scope, docs/design.md
// §4 "Hierarchical keys in shared mode") on a shared fence that
// implements gateway.TreeFence, across replicas: newState returns the
// Open of a fresh durable state, whose fences' drain timeout is long
// (10 s or so: the suite sets its own where it wants a refusal).
func RunTree(t *testing.T, newState func(t *testing.T) Open) {
	t.Run("Fence", func(t *testing.T) { testTreeFence(t, newState(t)) })
	t.Run("Drain", func(t *testing.T) { testTreeDrain(t, newState(t)) })
	t.Run("ScanRaiseWaits", func(t *testing.T) { testScanRaiseWaits(t, newState(t)) })
	t.Run("BucketScopes", func(t *testing.T) { testBucketScopes(t, newState(t)) })
	t.Run("TreeKeyOwnMarker", func(t *testing.T) { testTreeKeyOwnMarker(t, newState(t)) })
	t.Run("BelowRaiseLetsGo", func(t *testing.T) { testBelowRaiseLetsGo(t, newState(t)) })
	t.Run("SecondFirstWriteWaits", func(t *testing.T) { testSecondFirstWriteWaits(t, newState(t)) })
	t.Run("Randomized", func(t *testing.T) { testTreeRandomized(t, newState(t)) })
}

// treeFences opens n replicas, each a gateway.TreeFence.
func treeFences(t *testing.T, open Open, n int) []gateway.TreeFence {
	var out []gateway.TreeFence
	for _, f := range fences(t, open, Options{Replicas: true}, n) {
		tf, ok := f.(gateway.TreeFence)
		if !ok {
			t.Fatalf("%T does not implement gateway.TreeFence", f)
		}
		out = append(out, tf)
	}
	return out
}

// admitTree admits a write of key as a hierarchical {path} route does
// through a gateway.TreeFence: ScopeTree on the key, ScopeMember on every
// key above it.
func admitTree(f gateway.TreeFence, key string, tok int64) (gateway.Permit, error) {
	return f.AdmitTree(context.Background(), gateway.Write{Resource: key, Token: tok, Scope: gateway.ScopeTree}, resource.Parents(key))
}

// mustTree admits (and releases) key@tok, or fails the test.
func mustTree(t *testing.T, f gateway.TreeFence, key string, tok int64, what string) {
	t.Helper()
	p, err := admitTree(f, key, tok)
	if err != nil {
		t.Fatalf("%s: %s@%d: %v", what, key, tok, err)
	}
	p.Release()
}

// refusedTree checks that key@tok is refused with code.
func refusedTree(t *testing.T, f gateway.TreeFence, key string, tok int64, code, what string) {
	t.Helper()
	p, err := admitTree(f, key, tok)
	if err == nil {
		p.Release()
	}
	if Code(err) != code {
		t.Fatalf("%s: %s@%d: %v; want %s", what, key, tok, err, code)
	}
}

// testTreeFence: across two replicas, a collection write is refused after
// a newer member write (also one written before the key was ever checked
// as a collection: the scan), a member write after a newer collection
// write, at any depth; siblings of other owners and the collection's own
// token stay free.
func testTreeFence(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	r1, r2 := fs[0], fs[1]
	mustTree(t, r1, "/dav/coll/m", 9, "member")
	mustTree(t, r2, "/dav/coll/other", 3, "sibling with an older token")
	for _, key := range []string{"/dav/coll", "/dav"} {
		refusedTree(t, r2, key, 3, fencegate.CodeStaleToken, "collection after member 9 on the other replica")
		refusedTree(t, r2, key, 8, fencegate.CodeStaleToken, "collection after member 9")
	}
	// A member fence raised with no hierarchy (another route, or before
	// the upgrade): the collection's first write reads it.
	if _, err := r1.(gateway.Fence).Advance(context.Background(), "/old/c/m", 9, "w"); err != nil {
		t.Fatal(err)
	}
	refusedTree(t, r2, "/old/c", 3, fencegate.CodeStaleToken, "collection above a member fence at 9 raised without hierarchy")

	mustTree(t, r1, "/dav/coll", 10, "collection with a newer token")
	refusedTree(t, r2, "/dav/coll/m", 9, fencegate.CodeStaleToken, "member after collection 10")
	refusedTree(t, r2, "/dav/coll/new/deep", 9, fencegate.CodeStaleToken, "new deep member after collection 10")
	// Above the collection, an older sibling tree stays free: the
	// refused collection writes above left the fences as they were.
	mustTree(t, r2, "/dav/else", 4, "sibling tree with an older token")
	mustTree(t, r2, "/dav/coll/m", 10, "member with the collection's token")
	// A member written with a newer token on one replica: the
	// collection's token, accepted before, is now stale on the other.
	mustTree(t, r1, "/dav/coll/m", 11, "member with a newer token")
	refusedTree(t, r2, "/dav/coll", 10, fencegate.CodeStaleToken, "collection with its own token after member 11")
	mustTree(t, r2, "/dav/coll/m", 11, "repeated token")
}

// testTreeDrain proves I2 across levels and replicas: a newer collection
// write waits for an older member write in flight on the other replica,
// and a newer member write for an older collection write.
func testTreeDrain(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	r1, r2 := fs[0], fs[1]
	member, err := admitTree(r1, "/c/m", 5)
	if err != nil {
		t.Fatal(err)
	}
	short := gateway.Write{Resource: "/c", Token: 6, Scope: gateway.ScopeTree, DrainTimeout: 300 * time.Millisecond}
	if p, err := r2.AdmitTree(context.Background(), short, resource.Parents("/c")); Code(err) != fencegate.CodeFenceDraining {
		if p != nil {
			p.Release()
		}
		t.Fatalf("collection 6 while member 5 in flight on the other replica: %v; want fence_draining", err)
	}
	member.Release()
	coll, err := admitTree(r2, "/c", 7)
	if err != nil {
		t.Fatalf("collection 7 after the member landed: %v", err)
	}
	refusedTree(t, r1, "/c/m", 6, fencegate.CodeStaleToken, "member after collection 7")
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

// testScanRaiseWaits: a collection's scan that raises its below level
// (here the scan of a collection write refused because a member advanced
// past it) leaves the level not ready. A member write between the
// collection's token and the new level must still wait for the
// collection's own write in flight, which that scan did not wait for.
func testScanRaiseWaits(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	r1, r2 := fs[0], fs[1]
	mustTree(t, r1, "/s/m", 50, "member")
	mustTree(t, r1, "/s", 58, "collection")
	// The member's own fence advances first, as a member write's own-key
	// admission does before it reads the collections above it.
	p, err := r2.(gateway.Fence).Admit(context.Background(), gateway.Write{Resource: "/s/m", Token: 60})
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	coll, err := admitTree(r1, "/s", 58)
	if err != nil {
		t.Fatalf("collection write with its own token: %v", err)
	}
	// Scans the members (60) and raises the below level of /s to 60.
	refusedTree(t, r2, "/s", 59, fencegate.CodeStaleToken, "collection after member 60")
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

// testSecondFirstWriteWaits: a collection's first write waits for its
// members' writes in flight; a second write of the same token, made while
// the first waits (its scan of the members done), waits too rather than
// find the new record ready and the level below known (I2 across the
// hierarchy). Found on etcd by a stress run; the same held on PostgreSQL.
func testSecondFirstWriteWaits(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	r1, r2 := fs[0], fs[1]
	member, err := admitTree(r1, "/f/m", 1)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		p, err := admitTree(r2, "/f", 3)
		if err == nil {
			p.Release()
		}
		first <- err
	}()
	// Long enough for the first write to raise, scan and start its wait.
	time.Sleep(500 * time.Millisecond)
	awaitAdmitted(t, func() (gateway.Permit, error) { return admitTree(r1, "/f", 3) }, member, "a second write of the collection's first token while member 1 is in flight")
	if err := <-first; err != nil {
		t.Fatalf("the first write of the collection: %v", err)
	}
}

// testBucketScopes: an S3 route's scopes (an object write ScopeKey on its
// key and ScopeMember on the bucket's, a bucket write ScopeTree on the
// bucket's, through Admit) across replicas; a ScopeMember admission alone
// is refused.
func testBucketScopes(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	ctx := context.Background()
	object := func(f gateway.TreeFence, key string, tok int64) error {
		p, err := f.AdmitTree(ctx, gateway.Write{Resource: "b/" + key, Token: tok}, []string{"b"})
		if err == nil {
			p.Release()
		}
		return err
	}
	bucket := func(f gateway.TreeFence, tok int64) error {
		p, err := f.(gateway.Fence).Admit(ctx, gateway.Write{Resource: "b", Token: tok, Scope: gateway.ScopeTree})
		if err == nil {
			p.Release()
		}
		return err
	}
	if err := object(fs[0], "k", 9); err != nil {
		t.Fatal(err)
	}
	if err := bucket(fs[1], 8); Code(err) != fencegate.CodeStaleToken {
		t.Fatalf("bucket write 8 after object write 9: %v; want stale", err)
	}
	if err := bucket(fs[1], 12); err != nil {
		t.Fatalf("bucket write 12: %v", err)
	}
	if err := object(fs[0], "other", 11); Code(err) != fencegate.CodeStaleToken {
		t.Fatalf("object write 11 after bucket write 12: %v; want stale", err)
	}
	if err := object(fs[0], "k", 12); err != nil {
		t.Fatalf("object write with the bucket's token: %v", err)
	}
	if _, err := fs[0].(gateway.Fence).Admit(ctx, gateway.Write{Resource: "b", Token: 13, Scope: gateway.ScopeMember}); Code(err) != fencegate.CodeFenceUnavailable {
		t.Fatalf("ScopeMember alone: %v; want fence_unavailable", err)
	}
}

// testTreeKeyOwnMarker: the first tree write of a {path} route's tree key
// (K/, whose members' prefix is its own key) reads its own record, lets its
// marker go and scans the members: the scan waits for every marker below
// K/, its own among them, which must not linger idle for the scan to wait
// out (a second or more: markerIdle). Liveness, on three keys, the fastest
// counted: a loaded machine slows each, not all three past the bound.
func testTreeKeyOwnMarker(t *testing.T, open Open) {
	f := treeFences(t, open, 1)[0]
	fastest := fastestOf3(func(i int) (gateway.Permit, error) {
		w := gateway.Write{Resource: fmt.Sprintf("/own%d/", i), Token: 5, Scope: gateway.ScopeTree}
		return f.AdmitTree(context.Background(), w, nil)
	}, nil, t)
	if fastest > 900*time.Millisecond {
		t.Fatalf("the first write of a tree key took %s at the fastest: it waited for its own idle marker", fastest)
	}
}

// testBelowRaiseLetsGo: a member write above its collection's below level
// raises the level and waits for every marker of the collection's own key;
// the other replica's idle marker of the collection's last write (kept for
// the next write of its token) is let go at once, not waited out
// (markerIdle). Liveness, the fastest of three buckets counted.
func testBelowRaiseLetsGo(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	ctx := context.Background()
	fastest := fastestOf3(func(i int) (gateway.Permit, error) {
		bucket := fmt.Sprintf("bucket%d", i)
		return fs[0].AdmitTree(ctx, gateway.Write{Resource: bucket + "/k", Token: 13}, []string{bucket})
	}, func(i int) (gateway.Permit, error) {
		return fs[1].(gateway.Fence).Admit(ctx, gateway.Write{Resource: fmt.Sprintf("bucket%d", i), Token: 12, Scope: gateway.ScopeTree})
	}, t)
	if fastest > 900*time.Millisecond {
		t.Fatalf("an object write raising its bucket's level took %s at the fastest: it waited out the other replica's idle marker of the bucket", fastest)
	}
}

// fastestOf3 times admit(i) (after before(i), untimed, if set) for i of
// 0, 1, 2, releasing each permit, and returns the fastest: a loaded machine
// slows each, not all three past a bound.
func fastestOf3(admit, before func(i int) (gateway.Permit, error), t *testing.T) time.Duration {
	t.Helper()
	fastest := time.Hour
	for i := range 3 {
		if before != nil {
			p, err := before(i)
			if err != nil {
				t.Fatal(err)
			}
			p.Release()
		}
		start := time.Now()
		p, err := admit(i)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
		fastest = min(fastest, time.Since(start))
	}
	return fastest
}

// treeKeys is the tree of testTreeRandomized; related reports whether a
// write of one may change the other (every write is a tree write).
var treeKeys = []string{"/t", "/t/a", "/t/b", "/t/a/x", "/t/a/y"}

// Related reports whether keys a and b are one key or one is below the
// other: a write of one may change the other.
func Related(a, b string) bool {
	return a == b || strings.HasPrefix(b, a+"/") || strings.HasPrefix(a, b+"/")
}

// landed is one write the recording upstream applied: its key and token,
// when it reached the upstream (its permit held) and when it was done.
type landed struct {
	key        string
	tok        int64
	call, done int64 // nanoseconds since the run began
}

// treeUpstream is the resource behind the fence in testTreeRandomized: it
// records every write it applies, in the order they reach it, and refuses
// (records as a violation) a write that reaches it while a write of an
// older token of a related key is still being applied (I2).
type treeUpstream struct {
	start    time.Time
	mu       sync.Mutex
	log      []landed
	applying map[*landed]bool
	errs     []string
}

func (u *treeUpstream) now() int64 { return int64(time.Since(u.start)) }

// apply records key@tok reaching the upstream, holds it for d, and records
// its end.
func (u *treeUpstream) apply(key string, tok int64, d time.Duration) {
	u.mu.Lock()
	l := &landed{key: key, tok: tok, call: u.now()}
	for o := range u.applying {
		if Related(o.key, key) && o.tok < tok {
			u.errs = append(u.errs, fmt.Sprintf("%s@%d reached the upstream while %s@%d was being applied", key, tok, o.key, o.tok))
		}
	}
	u.applying[l] = true
	u.mu.Unlock()
	time.Sleep(d)
	u.mu.Lock()
	l.done = u.now()
	delete(u.applying, l)
	u.log = append(u.log, *l)
	u.mu.Unlock()
}

// treeState is the model's upstream: the highest token applied per key of
// treeKeys.
type treeState [5]int64

// treeModel: a write of key@tok may be applied only if no related key
// has had a newer token applied (I1 across the tree: a member after a
// newer collection write, a collection after a newer member write, a key
// after its own newer token).
var treeModel = porcupine.Model{
	Init: func() any { return treeState{} },
	Step: func(state, input, _ any) (bool, any) {
		st, in := state.(treeState), input.(landed)
		i := slices.Index(treeKeys, in.key)
		for j, k := range treeKeys {
			if Related(k, in.key) && st[j] > in.tok {
				return false, st
			}
		}
		st[i] = max(st[i], in.tok)
		return true, st
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(landed)
		return fmt.Sprintf("%s@%d", in.key, in.tok)
	},
}

// testTreeRandomized: writes of random keys of one small tree and random
// tokens, through two replicas, some held in flight a while. The recording
// upstream's history is checked: no write reached it while an older write
// of a related key was being applied (I2), and Porcupine finds an order of
// the applied writes, each within its time at the upstream, in which none
// follows a newer write of a related key (I1).
func testTreeRandomized(t *testing.T, open Open) {
	fs := treeFences(t, open, 2)
	up := &treeUpstream{start: time.Now(), applying: map[*landed]bool{}}
	var base, admitted atomic.Int64
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
				key := treeKeys[rnd.IntN(len(treeKeys))]
				tok := base.Load() + int64(rnd.IntN(3)) - 1
				p, err := admitTree(f, key, tok)
				if err != nil {
					if c := Code(err); c != fencegate.CodeStaleToken && c != fencegate.CodeFenceDraining {
						t.Errorf("%s@%d: %v", key, tok, err)
					}
					continue
				}
				admitted.Add(1)
				up.apply(key, tok, time.Duration(rnd.IntN(10000))*time.Microsecond)
				p.Release()
			}
		})
	}
	wg.Wait()
	for _, e := range up.errs {
		t.Error(e)
	}
	if admitted.Load() < 40 {
		t.Fatalf("only %d writes admitted", admitted.Load())
	}
	ops := make([]porcupine.Operation, len(up.log))
	for i, l := range up.log {
		ops[i] = porcupine.Operation{ClientId: i, Input: l, Call: l.call, Return: l.done}
	}
	if res := porcupine.CheckOperationsTimeout(treeModel, ops, time.Minute); res != porcupine.Ok {
		t.Fatalf("the upstream's history of %d writes is not one the fence allows (porcupine: %v)", len(ops), res)
	}
	t.Logf("%d writes applied", len(ops))
}
