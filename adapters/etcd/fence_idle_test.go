package etcd

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/gateway"
)

// TestSharedFenceIdleMarkersNotWaitedOut: replica A keeps its idle
// markers a minute; each drain of replica B that waits for one of them
// (a key's advance: A's marker of the older token; a collection's tree
// drain: A's marker below it; a member's below raise: A's marker of the
// collection's own key) is let go by A's watch at once, not waited out.
// What a longer markerIdle costs a drain is this wait, so it must stay
// far below the idle time: A's marker is in etcd before B's write and
// gone after it, and the records and level B raised are in etcd, ready.
func TestSharedFenceIdleMarkersNotWaitedOut(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{MarkerIdle: time.Minute, MarkerLinger: -1})
	b := c.replica(t, SharedFenceOptions{MarkerLinger: -1})
	for deadline := time.Now().Add(10 * time.Second); a.watchGen.Load()%2 == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("A's fence watch is not up after 10s")
		}
	}
	ctx := context.Background()
	cli := c.client(t)
	tree := func(f *SharedFence, w gateway.Write, above ...string) error {
		p, err := f.AdmitTree(ctx, w, above)
		if err == nil {
			p.Release()
		}
		return err
	}
	const bound = 5 * time.Second // the idle time is a minute; the drain timeout 20s
	for _, tc := range []struct {
		name string
		// idle is A's write, which leaves its marker of res at token idle.
		idle  func() error
		res   string
		token int64
		// drain is B's write, which waits for A's marker.
		drain func() error
		// check reads the durable state B's write leaves.
		check func(t *testing.T)
	}{{
		name: "key advance", res: "/k", token: 1,
		idle:  func() error { return tree(a, gateway.Write{Resource: "/k", Token: 1}) },
		drain: func() error { return tree(b, gateway.Write{Resource: "/k", Token: 2}) },
		check: func(t *testing.T) {
			if r := c.stored(t, "/k"); r.Highest != 2 || !r.Ready {
				t.Fatalf("/k's record in etcd: %+v, want highest 2, ready", r)
			}
		},
	}, {
		name: "tree drain of a collection", res: "/c1/k", token: 1,
		idle: func() error { return tree(a, gateway.Write{Resource: "/c1/k", Token: 1}, "/c1/") },
		drain: func() error {
			return tree(b, gateway.Write{Resource: "/c1/", Token: 2, Scope: gateway.ScopeTree})
		},
		check: func(t *testing.T) {
			if r := c.stored(t, "/c1/"); r.Highest != 2 || !r.Ready {
				t.Fatalf("/c1/'s record in etcd: %+v, want highest 2, ready", r)
			}
			if l := c.level(t, "/c1/"); l.Below < 1 || !l.Known {
				t.Fatalf("/c1/'s below level in etcd: %+v, want at least 1 (A's member write), known", l)
			}
		},
	}, {
		name: "below raise of a collection", res: "/c2", token: 1,
		// A write of the collection's own key, not a tree key (K/: its
		// new record lets go the markers below it, its own among them).
		idle:  func() error { return tree(a, gateway.Write{Resource: "/c2", Token: 1}) },
		drain: func() error { return tree(b, gateway.Write{Resource: "/c2/k", Token: 2}, "/c2") },
		check: func(t *testing.T) {
			if l := c.level(t, "/c2"); l.Below != 2 || !l.Ready {
				t.Fatalf("/c2's below level in etcd: %+v, want 2, ready", l)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.idle(); err != nil {
				t.Fatal(err)
			}
			key := a.markerKey(tc.res, tc.token, a.Lease())
			count := func() int64 {
				resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				return resp.Count
			}
			if count() != 1 {
				t.Fatalf("A's idle marker %q is not in etcd", key)
			}
			start := time.Now()
			err := tc.drain()
			took := time.Since(start)
			t.Logf("B's write took %s with A's idle marker of %s", took, tc.res)
			if err != nil {
				t.Fatalf("B's write: %v (after %s)", err, took)
			}
			if took > bound {
				t.Fatalf("B's write took %s: it waited out A's idle marker of %s (kept %s)", took, tc.res, a.idle)
			}
			if count() != 0 {
				t.Fatalf("A's idle marker %q is still in etcd after B's drain", key)
			}
			tc.check(t)
		})
	}
}

// level reads coll's below level straight from etcd.
func (c *testCluster) level(t *testing.T, coll string) level {
	t.Helper()
	resp, err := c.client(t).Get(context.Background(), c.prefix+"/b/"+coll)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := decodeLevel(first(resp.Kvs))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSharedFenceMarkerAfterRaiseNotWaitedOut: replica A's first write of
// a collection's own key lands after B raised the collection's below
// level (and after A's watch let go A's markers of the key) but before
// B's below drain reads the markers, so B waits for it. A's write read
// the level raised, not ready: its marker must not linger idle for B to
// wait out (A keeps idle markers a minute; B's drain timeout is 20s).
func TestSharedFenceMarkerAfterRaiseNotWaitedOut(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{MarkerIdle: time.Minute, MarkerLinger: -1})
	b := c.replica(t, SharedFenceOptions{MarkerLinger: -1})
	ctx := context.Background()
	cli := c.client(t)
	key := a.markerKey("/c/", 1, a.Lease())
	var once sync.Once
	aDone := make(chan error, 1)
	hook := func() {
		once.Do(func() {
			// A's watch lets go what A holds now (nothing of /c/); the
			// write below puts A's first marker of /c/.
			time.Sleep(300 * time.Millisecond)
			// Watched from the revision before A's write: the marker may
			// be put and deleted again (A's write is released at once)
			// between two polls.
			cur, err := cli.Get(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			wch := cli.Watch(wctx, key, clientv3.WithRev(cur.Header.Revision+1), clientv3.WithFilterDelete())
			go func() {
				p, err := a.AdmitTree(ctx, gateway.Write{Resource: "/c/", Token: 1}, nil)
				if err == nil {
					p.Release()
				}
				aDone <- err
			}()
			for wr := range wch {
				if err := wr.Err(); err != nil {
					t.Error(err)
					return
				}
				if len(wr.Events) > 0 {
					return // put
				}
			}
			t.Error("A's marker of /c/ not put in etcd within 10s")
		})
	}
	// /c/ written through B: A holds no marker of it.
	cp, err := b.AdmitTree(ctx, gateway.Write{Resource: "/c/", Token: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp.Release()
	testHookBelowRaised.Store(&hook)
	t.Cleanup(func() { testHookBelowRaised.Store(nil) })
	start := time.Now()
	p, err := b.AdmitTree(ctx, gateway.Write{Resource: "/c/k", Token: 2}, []string{"/c/"})
	took := time.Since(start)
	t.Logf("B's member write took %s", took)
	if err != nil {
		t.Fatalf("B's member write: %v (after %s)", err, took)
	}
	p.Release()
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatalf("A's write of /c/: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("B's below drain did not run (the hook), or A's write of /c/ still waits after 20s")
	}
	if took > 5*time.Second {
		t.Fatalf("B's member write took %s: it waited out A's idle marker of /c/", took)
	}
	resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("A's marker of /c/ still in etcd after B's drain")
	}
	if l := c.level(t, "/c/"); l.Below != 2 || !l.Ready {
		t.Fatalf("/c/'s below level in etcd: %+v, want 2, ready", l)
	}
}
