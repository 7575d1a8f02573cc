package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/fencetest"
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

// countTxns counts the marker Txns that read or write a key of resource
// (the lease's renewals and the replica's reports, which f.Requests also
// counts, run whatever the writes do).
func countTxns(t *testing.T, f *SharedFence, resource string) *atomic.Int64 {
	var n atomic.Int64
	fk, mdir := f.fenceKey(resource), f.markerDir(resource)
	hook := func(then []clientv3.Op) {
		for _, op := range then {
			if k := string(op.KeyBytes()); k == fk || strings.HasPrefix(k, mdir) {
				n.Add(1)
				return
			}
		}
	}
	testHookMarkerTxn.Store(&hook)
	t.Cleanup(func() { testHookMarkerTxn.Store(nil) })
	return &n
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

// joinOrderedFirst runs raise (another replica's write of a newer token,
// raising the record of raised to highest) and, once that record is in
// etcd, join on replica a, whose watch is held: join must be admitted
// without a request, and raise admitted only after join's write ended.
func joinOrderedFirst(t *testing.T, c *testCluster, a *SharedFence, raised string, highest int64, raise, join func() (gateway.Permit, error)) {
	t.Helper()
	type result struct {
		p   gateway.Permit
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		p, err := raise()
		done <- result{p, err, time.Now()}
	}()
	for deadline := time.Now().Add(10 * time.Second); c.stored(t, raised).Highest != highest; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the newer write did not raise %s to %d within 10s", raised, highest)
		}
	}
	joins := a.joins.Load()
	pa, err := join()
	if err != nil {
		t.Fatalf("A's write before its watch brought the raise: %v (want joined)", err)
	}
	if a.joins.Load() != joins+1 {
		t.Fatal("A's write was not a join")
	}
	select {
	case r := <-done:
		t.Fatalf("the newer write admitted (%v) while A's joined write is in flight", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	ended := time.Now()
	pa.Release()
	r := <-done
	if r.err != nil {
		t.Fatalf("the newer write: %v", r.err)
	}
	if r.at.Before(ended) {
		t.Fatal("the newer write admitted before A's joined write ended")
	}
	r.p.Release()
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
	txns := countTxns(t, f, "/hot")
	joins := f.joins.Load()
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
	if n := txns.Load(); n != 0 {
		t.Fatalf("20 writes of a repeated token sent %d marker Txns, want none", n)
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
	// A's marker of 5 lingers, its record read at 5 and ready.
	c, a, b := lingering(t, SharedFenceOptions{}, "/k", 5)
	release := holdWatch(t, a, "/k")
	joinOrderedFirst(t, c, a, "/k", 6,
		func() (gateway.Permit, error) { return admit(b, "/k", 6) },
		func() (gateway.Permit, error) { return admit(a, "/k", 5) })
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
	for _, raise := range operatorRaises {
		t.Run(raise.name, func(t *testing.T) {
			// A's marker of 3 lingers, read at 3 and ready: its next write of 3 joins.
			c, a, b := lingering(t, SharedFenceOptions{}, "/h", 3)
			holdWatch(t, a, "/h")
			if err := raise.do(b, "/h", 9); err != nil {
				t.Fatalf("%s to 9: %v", raise.name, err)
			}
			if n := c.markerCount(t, a, "/h", 3); n != 0 {
				t.Fatalf("the %s returned while A's marker of 3 is in etcd", raise.name)
			}
			if _, err := admit(a, "/h", 3); code(err) != fencegate.CodeStaleToken {
				t.Fatalf("token 3 on A after the %s to 9 returned: %v; want stale", raise.name, err)
			}
			if rec := c.stored(t, "/h"); rec.Highest != 9 {
				t.Fatalf("/h's record in etcd: %+v, want highest 9", rec)
			}
		})
	}
}

// operatorRaises are the operator's ways to raise a fence: an advance
// (`fence advance`, POST /v1/fences/advance) and an import (`fence
// import`, `fence rebuild`), which the CLI runs on the store alone, with
// no marker of its own.
var operatorRaises = []struct {
	name string
	do   func(f *SharedFence, res string, token int64) error
}{
	{"advance", func(f *SharedFence, res string, token int64) error {
		st, err := f.Advance(context.Background(), res, token, "op")
		if err == nil && st.Highest != token {
			err = fmt.Errorf("returned %+v", st)
		}
		return err
	}},
	{"import", func(f *SharedFence, res string, token int64) error {
		n, err := f.Store.ImportFences(context.Background(), []fencegate.FenceRecord{{Resource: res, Highest: token, Owner: "op"}})
		if err == nil && n != 1 {
			err = fmt.Errorf("raised %d records, want 1", n)
		}
		return err
	}},
}

// treeWrite admits a write of key k below the collections above (ScopeKey
// on k, ScopeMember on each of above), or a collection's own write
// (scope ScopeTree).
func treeWrite(f *SharedFence, k string, token int64, scope gateway.Scope, above ...string) (gateway.Permit, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.AdmitTree(ctx, gateway.Write{Resource: k, Token: token, Scope: scope}, above)
}

// A repeated token on a key below a written collection joins too, with
// the rows its last read found; a change of the collection's record or
// below level the watch brings (a put or a delete, as a reset's) sends the
// next write to read again.
func TestSharedFenceTreeJoin(t *testing.T) {
	c := newCluster(t)
	f := c.replica(t, SharedFenceOptions{MarkerIdle: time.Minute})
	waitWatch(t, f)
	p, err := treeWrite(f, "/c", 3, gateway.ScopeTree)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	write := func(i int) {
		t.Helper()
		p, err := treeWrite(f, "/c/k", 3, gateway.ScopeKey, "/c")
		if err != nil {
			t.Fatalf("write %d of /c/k: %v", i, err)
		}
		if n := c.markerCount(t, f, "/c/k", 3); n != 1 {
			t.Fatalf("write %d of /c/k admitted while its marker is not in etcd", i)
		}
		p.Release()
	}
	write(0)
	txns := countTxns(t, f, "/c/k")
	for i := range 10 {
		write(1 + i)
	}
	if n := txns.Load(); n != 0 {
		t.Fatalf("10 writes of a repeated token below a collection sent %d marker Txns, want none", n)
	}
	cli := c.client(t)
	level := f.belowKey("/c")
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"the below level put again", func() error {
			resp, err := cli.Get(context.Background(), level)
			if err == nil {
				_, err = cli.Put(context.Background(), level, string(resp.Kvs[0].Value))
			}
			return err
		}},
		{"the below level deleted", func() error { _, err := cli.Delete(context.Background(), level); return err }},
	} {
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		// The watch brings the change; then the next write reads.
		deadline := time.Now().Add(10 * time.Second)
		for {
			before := txns.Load()
			write(0)
			if txns.Load() > before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: writes of /c/k still join without a read 10s later", change.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
		before := txns.Load()
		write(1)
		if n := txns.Load() - before; n != 0 {
			t.Fatalf("%s: the write after the read sent %d marker Txns, want none (joined again)", change.name, n)
		}
	}
}

// lingeringBelow is lingering below a collection: A writes /c at 3, then
// /c/k at 5; its marker of /c/k lingers with the rows it read, so A's
// next write of /c/k at 5 joins.
func lingeringBelow(t *testing.T) (c *testCluster, a, b *SharedFence) {
	t.Helper()
	c = newCluster(t)
	a = c.replica(t, SharedFenceOptions{})
	b = c.replica(t, SharedFenceOptions{})
	waitWatch(t, a)
	waitWatch(t, b)
	p, err := treeWrite(a, "/c", 3, gateway.ScopeTree)
	if err == nil {
		p.Release()
		p, err = treeWrite(a, "/c/k", 5, gateway.ScopeKey, "/c")
	}
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	return c, a, b
}

// A write below a collection that joins while the watch has not brought
// another replica's raise of the collection is ordered before the
// collection's write: its tree drain waits for the joined write (I2 across
// the hierarchy), and the key's token is refused below the collection
// afterwards.
func TestSharedFenceTreeJoinDuringLagOrderedBeforeCollection(t *testing.T) {
	c, a, b := lingeringBelow(t)
	release := holdWatch(t, a, "/c")
	joinOrderedFirst(t, c, a, "/c", 6,
		func() (gateway.Permit, error) { return treeWrite(b, "/c", 6, gateway.ScopeTree) },
		func() (gateway.Permit, error) { return treeWrite(a, "/c/k", 5, gateway.ScopeKey, "/c") })
	release()
	if _, err := treeWrite(a, "/c/k", 5, gateway.ScopeKey, "/c"); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("A's write of /c/k at 5 after /c's write at 6: %v, want stale", err)
	}
	if rec := c.stored(t, "/c"); rec.Highest != 6 || !rec.Ready {
		t.Fatalf("/c's record in etcd: %+v, want highest 6, ready", rec)
	}
}

// An operator's advance of a collection refuses, once it returns, the
// older tokens of the keys below it on every replica, even on one whose
// watch has not brought it and whose writes below would join with the
// rows they last read.
func TestSharedFenceAdvanceOfCollectionRefusesJoinsBelow(t *testing.T) {
	for _, raise := range operatorRaises {
		t.Run(raise.name, func(t *testing.T) {
			c, a, b := lingeringBelow(t)
			holdWatch(t, a, "/c")
			if err := raise.do(b, "/c", 9); err != nil {
				t.Fatalf("%s of /c to 9: %v", raise.name, err)
			}
			if n := c.markerCount(t, a, "/c/k", 5); n != 0 {
				t.Fatalf("the %s of /c returned while A's marker of /c/k is in etcd", raise.name)
			}
			if _, err := treeWrite(a, "/c/k", 5, gateway.ScopeKey, "/c"); code(err) != fencegate.CodeStaleToken {
				t.Fatalf("/c/k at 5 on A after the %s of /c to 9 returned: %v; want stale", raise.name, err)
			}
		})
	}
}

// lagWatch delays each event of every fence watch of the process by a
// random 0–30 ms until the test ends: replicas that join their markers on
// what their watch last brought, while it lags.
func lagWatch(t *testing.T) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 7))
	hook := func(*clientv3.Event) {
		mu.Lock()
		d := time.Duration(rng.IntN(30)) * time.Millisecond
		mu.Unlock()
		time.Sleep(d)
	}
	testHookWatched.Store(&hook)
	t.Cleanup(func() { testHookWatched.Store(nil) })
}

// The fence contracts (the randomized runs among them) with every
// replica's watch lagging: what a join admits while its watch has not
// brought a raise must still be ordered before the raise's writes.
func TestContractsWatchLagging(t *testing.T) {
	lagWatch(t)
	fencetest.Run(t, fencetest.Options{Replicas: true}, func(t *testing.T) fencetest.Open {
		c := newCluster(t)
		return c.open(c.prefix, SharedFenceOptions{LeaseTTL: 2 * time.Second, ForwardTimeout: 2 * time.Second})
	})
	c := newCluster(t)
	n := 0
	fencetest.RunTree(t, func(t *testing.T) fencetest.Open {
		n++
		return c.open(fmt.Sprintf("/tree%d", n), SharedFenceOptions{LeaseTTL: 2 * time.Second, DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	})
}

// A watch stalled without an error (its stream stuck, nothing to restart
// it) does not let writes of an older token join for ever: after
// joinFresh a write reads its record again, sees the raise, and the newer
// token's drain passes once the writes in flight end, long before its
// drain timeout; no older write is admitted after the newer one.
func TestSharedFenceJoinStalledWatchReadsAgain(t *testing.T) {
	_, a, b := lingering(t, SharedFenceOptions{}, "/s", 5)
	holdWatch(t, a, "/s") // A's watch never brings the raise
	var mu sync.Mutex
	var lastOld, newAt time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := admit(a, "/s", 5)
				if err != nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				lastOld = time.Now()
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				p.Release()
			}
		})
	}
	start := time.Now()
	p, err := admit(b, "/s", 6)
	took := time.Since(start)
	mu.Lock()
	newAt = time.Now()
	mu.Unlock()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("B's write of 6 while A's watch is stalled and A keeps writing 5: %v (after %s)", err, took)
	}
	p.Release()
	if took > joinFresh+5*time.Second {
		t.Fatalf("B's write of 6 waited %s, want about joinFresh (%s)", took, joinFresh)
	}
	if lastOld.After(newAt) {
		t.Fatal("A admitted a write of 5 after B's write of 6 was admitted")
	}
}
