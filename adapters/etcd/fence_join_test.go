package etcd

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// waitWatch waits until f's fence watch is up.
func waitWatch(t *testing.T, f *SharedFence) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); f.watchGen.Load()%2 == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fence watch is not up after 10s")
		}
	}
}

// holdWatch makes the fences' watches (every fence of the test process)
// hold each event of resource's record until the returned release is
// called: a watch that lags.
func holdWatch(t *testing.T, f *SharedFence, resource string) (release func()) {
	key := f.fenceKey(resource)
	gate := make(chan struct{})
	hook := func(ev *clientv3.Event) {
		if string(ev.Kv.Key) == key {
			select {
			case <-gate:
			case <-time.After(30 * time.Second):
			}
		}
	}
	testHookWatched.Store(&hook)
	var once sync.Once
	release = func() { once.Do(func() { close(gate); testHookWatched.Store(nil) }) }
	t.Cleanup(release)
	return release
}

// markerCount counts f's markers of resource at token in etcd (the durable
// state the drains read).
func (c *testCluster) markerCount(t *testing.T, f *SharedFence, resource string, token int64) int64 {
	t.Helper()
	resp, err := c.client(t).Get(context.Background(), f.markerKey(resource, token, f.Lease()), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// A repeated token on a key whose marker lingers, its record read at that
// token and ready, is admitted without an etcd request, with its marker in
// etcd all the while.
func TestSharedFenceJoinSendsNothing(t *testing.T) {
	c := newCluster(t)
	f := c.replica(t, SharedFenceOptions{MarkerIdle: time.Minute})
	waitWatch(t, f)
	p, err := admit(f, "/hot", 3)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	before, joins := f.Requests(), f.joins.Load()
	for i := range 20 {
		p, err := admit(f, "/hot", 3)
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if n := c.markerCount(t, f, "/hot", 3); n != 1 {
			t.Fatalf("write %d admitted while its marker is not in etcd", i)
		}
		p.Release()
	}
	if n := f.Requests() - before; n != 0 {
		t.Fatalf("20 writes of a repeated token sent %d etcd requests, want none", n)
	}
	if n := f.joins.Load() - joins; n != 20 {
		t.Fatalf("%d of 20 writes joined without a request", n)
	}
	// An older token is still read, and refused.
	if _, err := admit(f, "/hot", 2); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 2 under 3: %v, want stale", err)
	}
}

// A write that joins its marker while the watch has not yet brought
// another replica's raise is ordered before the raise's write: B's newer
// token waits until A's joined write has ended (I2), and A's token is
// refused once B's write is admitted.
func TestSharedFenceJoinDuringLagOrderedBeforeRaise(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	waitWatch(t, a)
	waitWatch(t, b)
	p, err := admit(a, "/k", 5)
	if err != nil {
		t.Fatal(err)
	}
	p.Release() // A's marker of 5 lingers, its record read at 5 and ready
	release := holdWatch(t, a, "/k")

	type result struct {
		p   gateway.Permit
		err error
		at  time.Time
	}
	bDone := make(chan result, 1)
	go func() {
		p, err := admit(b, "/k", 6)
		bDone <- result{p, err, time.Now()}
	}()
	for deadline := time.Now().Add(10 * time.Second); c.stored(t, "/k").Highest != 6; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B did not raise /k to 6 within 10s")
		}
	}
	joins := a.joins.Load()
	pa, err := admit(a, "/k", 5)
	if err != nil {
		t.Fatalf("A's write of 5 before its watch brought the raise: %v (want joined)", err)
	}
	if a.joins.Load() != joins+1 {
		t.Fatal("A's write of 5 was not a join")
	}
	select {
	case r := <-bDone:
		t.Fatalf("B's write of 6 admitted (%v) while A's write of 5 is in flight", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	ended := time.Now()
	pa.Release()
	r := <-bDone
	if r.err != nil {
		t.Fatalf("B's write of 6: %v", r.err)
	}
	if r.at.Before(ended) {
		t.Fatal("B's write of 6 admitted before A's write of 5 ended")
	}
	r.p.Release()
	if _, err := admit(a, "/k", 5); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("A's write of 5 after B's write of 6: %v, want stale", err)
	}
	release()
	if rec := c.stored(t, "/k"); rec.Highest != 6 || !rec.Ready {
		t.Fatalf("/k's record in etcd: %+v, want highest 6, ready", rec)
	}
}

// An operator's advance refuses older tokens on every replica once it
// returns, even on one whose watch has not brought it: Advance returns
// only when no marker of an older token is left.
func TestSharedFenceAdvanceRefusesJoinsAtOnce(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	waitWatch(t, a)
	p, err := admit(a, "/h", 3)
	if err != nil {
		t.Fatal(err)
	}
	p.Release() // lingers, read at 3 and ready: the next write of 3 joins
	holdWatch(t, a, "/h")
	st, err := b.Advance(context.Background(), "/h", 9, "op")
	if err != nil || st.Highest != 9 {
		t.Fatalf("advance to 9: %+v, %v", st, err)
	}
	if n := c.markerCount(t, a, "/h", 3); n != 0 {
		t.Fatal("the advance returned while A's marker of 3 is in etcd")
	}
	if _, err := admit(a, "/h", 3); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 3 on A after the advance to 9 returned: %v; want stale", err)
	}
	if rec := c.stored(t, "/h"); rec.Highest != 9 {
		t.Fatalf("/h's record in etcd: %+v, want highest 9", rec)
	}
}
