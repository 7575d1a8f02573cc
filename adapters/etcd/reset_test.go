package etcd

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

// LowerFence (fence reset on etcd), checked against the record in etcd:
// refused while a write admitted under the higher fence is in flight,
// then the record is lowered, not ready; a token below the new value stays
// stale and the value itself is admitted.
func TestLowerFence(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	a := c.replica(t, SharedFenceOptions{MarkerIdle: 50 * time.Millisecond})
	ctx := context.Background()
	const res = "/orders/7"

	p, err := admit(a, res, 3)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	p900, err := admit(a, res, 900) // the mistaken token, its write in flight
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.LowerFence(ctx, res, 5, "op", nil); !errors.Is(err, gateway.ErrWritesInFlight) || code(err) != fencegate.CodeFenceDraining {
		t.Fatalf("reset under a write of 900 in flight: %v; want writes in flight", err)
	}
	if r := c.stored(t, res); r.Highest != 900 {
		t.Fatalf("etcd record after the refused reset: %+v; want 900 kept", r)
	}
	p900.Release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := a.LowerFence(ctx, res, 5, "op", nil)
		if err == nil {
			if st.Highest != 5 || st.Ready {
				t.Fatalf("reset answered %+v; want highest 5 not ready", st)
			}
			break
		}
		if !errors.Is(err, gateway.ErrWritesInFlight) || time.Now().After(deadline) {
			t.Fatalf("reset after the write ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := c.stored(t, res); r.Highest != 5 || r.Ready || r.Owner != "op" {
		t.Fatalf("etcd record after the reset: %+v; want highest 5, not ready, owner op", r)
	}
	if _, err := admit(a, res, 4); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 4 after the reset to 5: %v; want stale", err)
	}
	if p, err = admit(a, res, 5); err != nil {
		t.Fatalf("token 5 after the reset to 5: %v", err)
	}
	p.Release()
	if r := c.stored(t, res); r.Highest != 5 || !r.Ready {
		t.Fatalf("etcd record after token 5's write: %+v; want highest 5 ready", r)
	}

	// Nothing to lower: a fence at or below the value, or none.
	if st, err := a.LowerFence(ctx, res, 7, "op", nil); err != nil || st.Highest != 5 {
		t.Fatalf("reset to 7 of a fence at 5: %+v, %v; want 5 kept", st, err)
	}
	if _, err := a.LowerFence(ctx, "/none", 7, "op", nil); err != nil {
		t.Fatal(err)
	}
	if r := c.stored(t, "/none"); r.Highest != 0 {
		t.Fatalf("a reset created a record: %+v", r)
	}
	if _, err := a.LowerFence(ctx, res, 0, "op", nil); !errors.Is(err, fencegate.ErrResetNotPositive) {
		t.Fatalf("reset to 0: %v", err)
	}
}

// After a reset, the first write of the new value drains the writes of
// older tokens still in flight (their markers are below it), as after an
// advance: a write of 3 in flight across a mistaken raise to 900 and the
// reset to 5 still holds token 5 back until it ends.
func TestLowerFenceDrainsOlder(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	ctx := context.Background()
	const res = "/orders/8"
	p3, err := admit(a, res, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AdvanceFence(ctx, res, 900, "op"); err != nil { // the mistake, by hand
		t.Fatal(err)
	}
	if _, err := b.LowerFence(ctx, res, 5, "op", nil); err != nil {
		t.Fatalf("reset with only an older write in flight: %v", err)
	}
	var released atomic.Bool
	done := make(chan error, 1)
	go func() {
		p, err := admit(b, res, 5)
		if err == nil {
			if !released.Load() {
				err = errors.New("token 5 admitted while token 3 was in flight")
			}
			p.Release()
		}
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	if r := c.stored(t, res); r.Highest != 5 || r.Ready {
		t.Fatalf("etcd record during the drain: %+v; want highest 5 not ready", r)
	}
	released.Store(true)
	p3.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("token 5 still waiting 10s after token 3's write ended")
	}
	if r := c.stored(t, res); r.Highest != 5 || !r.Ready {
		t.Fatalf("etcd record after the drain: %+v; want highest 5 ready", r)
	}
}

// A reset of a member fenced with a mistaken token also forgets the below
// level it raised on the collections above, so the collections' owners are
// not refused for a token that no longer counts, while the other members'
// records still count (as TestSharedResetLowersBelow on PostgreSQL).
func TestLowerFenceForgetsBelow(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	a := c.replica(t, SharedFenceOptions{MarkerIdle: 50 * time.Millisecond})
	ctx := context.Background()
	tree := func(key string, tok int64) error {
		p, err := a.AdmitTree(ctx, gateway.Write{Resource: key, Token: tok, Scope: gateway.ScopeTree}, resource.Parents(key))
		if err == nil {
			p.Release()
		}
		return err
	}
	for _, key := range []string{"/r", "/r/c"} {
		if err := tree(key, 1); err != nil {
			t.Fatal(err)
		}
	}
	for key, tok := range map[string]int64{"/r/c/m": 100, "/r/c/n": 7} {
		if err := tree(key, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := tree("/r/c", 8); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection 8 below member 100: %v; want stale", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := a.LowerFence(ctx, "/r/c/m", 5, "op", nil)
		if err == nil {
			break
		}
		if !errors.Is(err, gateway.ErrWritesInFlight) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tree("/r/c", 6); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("collection 6 below member /r/c/n at 7 after the reset: %v; want stale", err)
	}
	for _, key := range []string{"/r/c", "/r"} {
		if err := tree(key, 8); err != nil {
			t.Fatalf("collection %s with 8 after the member's reset to 5: %v", key, err)
		}
	}
	if r := c.stored(t, "/r"); r.Highest != 8 {
		t.Fatalf("etcd record of /r: %+v; want 8", r)
	}
}

// A reset lowers the ETag record's token with the fence: left at the
// mistaken token's, it would refuse the record of every write of the new
// value (a record is never replaced by an older token's), and each second
// write of the holder would be made conditional on a version its first
// write replaced (precondition_failed). The ETag key in etcd is read back.
func TestLowerFenceLowersETagRecord(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	a := c.replica(t, SharedFenceOptions{})
	ctx := context.Background()
	const res = "/orders/9"
	if _, err := a.AdvanceFence(ctx, res, 900, "op"); err != nil { // the mistake
		t.Fatal(err)
	}
	if err := a.RecordETag(ctx, res, 900, `"e900"`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LowerFence(ctx, res, 5, "op", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.storedETag(t, res); r.Token != 5 || r.ETag != `"e900"` {
		t.Fatalf("ETag record after the reset to 5: %+v; want the version last written, token 5", r)
	}
	p, err := admit(a, res, 5)
	if err != nil {
		t.Fatal(err)
	}
	err = a.RecordETag(ctx, res, 5, `"e5"`)
	p.Release()
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := c.storedETag(t, res); r.Token != 5 || r.ETag != `"e5"` {
		t.Fatalf("ETag record after a write of 5: %+v; want its ETag", r)
	}
	// A record at or below the new value is left as it is.
	if _, err := a.AdvanceFence(ctx, res, 50, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LowerFence(ctx, res, 7, "op", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.storedETag(t, res); r.Token != 5 || r.ETag != `"e5"` {
		t.Fatalf("ETag record of 5 after a reset to 7: %+v; want it kept", r)
	}
}

// A reset waits for the markers above its value that no write holds any
// more (a replica keeps one about a second after its last write) rather
// than refuse: one call lowers the fence.
func TestLowerFenceWaitsForIdleMarkers(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	a := c.replica(t, SharedFenceOptions{}) // markers idle 1s
	b := c.replica(t, SharedFenceOptions{})
	const res = "/orders/8"
	p, err := admit(a, res, 900) // the mistaken token; its write ended
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if n := c.markerCount(t, a, res, 900); n != 1 {
		t.Fatal("A's marker of 900 is not lingering in etcd")
	}
	start := time.Now()
	st, err := b.LowerFence(context.Background(), res, 5, "op", nil)
	if err != nil {
		t.Fatalf("reset with only an idle marker above it: %v; want it lowered", err)
	}
	if took := time.Since(start); st.Highest != 5 || took > idleGone+time.Second {
		t.Fatalf("reset answered %+v after %s; want highest 5 within about %s", st, took, idleGone)
	}
	if r := c.stored(t, res); r.Highest != 5 {
		t.Fatalf("etcd record after the reset: %+v; want highest 5", r)
	}
}
