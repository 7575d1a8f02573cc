package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/fencetest"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

type testCluster struct {
	*testenv.EtcdCluster
	prefix string
}

// newCluster starts a fresh three-member cluster for t (tests that kill
// members need their own).
func newCluster(t *testing.T) *testCluster {
	t.Helper()
	return &testCluster{EtcdCluster: testenv.Etcd(t, 3), prefix: "/fg"}
}

func (c *testCluster) client(t *testing.T) *clientv3.Client {
	t.Helper()
	return c.store(t).client
}

// store opens the cluster as a gateway process does (its own client).
func (c *testCluster) store(t *testing.T) *Store {
	t.Helper()
	st, err := OpenStore(StoreOptions{Client: ClientOptions{Endpoints: c.Endpoints}, Prefix: c.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// replica starts a shared fence (one gateway replica) on c.
func (c *testCluster) replica(t *testing.T, opts SharedFenceOptions) *SharedFence {
	t.Helper()
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 2 * time.Second
	}
	if opts.ForwardTimeout == 0 {
		opts.ForwardTimeout = 2 * time.Second
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 20 * time.Second
	}
	f := NewSharedFence(c.store(t), opts)
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// stored reads resource's fence record straight from etcd (the durable
// state, not the fence's answer).
func (c *testCluster) stored(t *testing.T, resource string) record {
	t.Helper()
	cli := c.client(t)
	resp, err := cli.Get(context.Background(), c.prefix+"/f/"+resource)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return record{}
	}
	r, err := decode(resp.Kvs[0])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func admit(f *SharedFence, res string, token int64) (gateway.Permit, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.Admit(ctx, gateway.Write{Resource: res, Token: token})
}

func code(err error) string {
	if r, ok := fencegate.Refusal(err); ok {
		return r.Code
	}
	return fmt.Sprint(err)
}

// Seed test 1 across replicas: A wrote with 5, B advanced to 6; A's late
// write is refused, and the record in etcd says 6.
func TestSharedFenceStaleOwner(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	p, err := admit(a, "/orders/7", 5)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	p, err = admit(b, "/orders/7", 6)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if _, err := admit(a, "/orders/7", 5); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("late write of token 5 after 6: got %v, want stale_fencing_token", err)
	}
	if r := c.stored(t, "/orders/7"); r.Highest != 6 || !r.Ready {
		t.Fatalf("etcd record: %+v, want highest 6 ready", r)
	}
	// A repeated token on the replica that did not advance is accepted.
	p, err = admit(a, "/orders/7", 6)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
}

// I2 across replicas: B's newer token waits until A's older write in
// flight ended, even with A's marker lingering afterwards.
func TestSharedFenceCrossReplicaDrain(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	pa, err := admit(a, "/r", 5)
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	done := make(chan error, 1)
	go func() {
		p, err := admit(b, "/r", 6)
		if err == nil {
			if !released.Load() {
				err = errors.New("token 6 admitted while token 5 was in flight on the other replica")
			}
			p.Release()
		}
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("token 6 decided while 5 in flight: %v", err)
	default:
	}
	if r := c.stored(t, "/r"); r.Highest != 6 || r.Ready {
		t.Fatalf("etcd record during the drain: %+v, want highest 6 not ready", r)
	}
	released.Store(true)
	pa.Release()
	at := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("token 6 admitted %s after token 5's write ended", time.Since(at))
	case <-time.After(10 * time.Second):
		t.Fatal("token 6 still waiting 10s after token 5's write ended (a lingering marker held the drain)")
	}
	if r := c.stored(t, "/r"); r.Highest != 6 || !r.Ready {
		t.Fatalf("etcd record after the drain: %+v, want highest 6 ready", r)
	}
}

// A replica's lease lost while a write is in flight (revoked here, as
// etcd does when the replica stops renewing): the replica aborts the
// forward with SessionLostError, and the other replica's newer token waits
// the forward timeout before it is forwarded (the aborted write may have
// gone out whole).
func TestSharedFenceLeaseLostWaitsForwardTimeout(t *testing.T) {
	c := newCluster(t)
	const ft = 3 * time.Second
	a := c.replica(t, SharedFenceOptions{ForwardTimeout: ft})
	b := c.replica(t, SharedFenceOptions{ForwardTimeout: ft})
	aborted := make(chan error, 1)
	pa, err := a.Admit(context.Background(), gateway.Write{Resource: "/r", Token: 5,
		Abort: func(cause error) { aborted <- cause }})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Release()
	if _, err := c.client(t).Revoke(context.Background(), a.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-aborted:
		var sl *fencegate.SessionLostError
		if !errors.As(cause, &sl) {
			t.Fatalf("abort cause %v, want SessionLostError", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write in flight on the lost lease was not aborted")
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		pb, err := admit(b, "/r", 6)
		if err == nil {
			pb.Release()
		}
		done <- err
	}()
	// While it waits, the replica says so (/readyz, the console).
	for st := b.Recovery(); !st.Recovering || st.Held != 1; st = b.Recovery() {
		if time.Since(start) > ft {
			t.Fatalf("recovery status during the wait: %+v; want recovering, 1 resource held", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < ft-200*time.Millisecond {
		t.Fatalf("token 6 forwarded %s after the lease of token 5's replica was lost; want at least the forward timeout %s", waited, ft)
	}
	// The lost replica serves again on a new lease.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := admit(a, "/r", 6)
		if err == nil {
			p.Release()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not come back on a new lease: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The replica cannot renew (the whole cluster stopped): it aborts its
// forward within the lease TTL, before etcd could have expired its markers.
func TestSharedFenceAbortsWhenLeaseUnproven(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{LeaseTTL: 2 * time.Second, ForwardTimeout: 20 * time.Second})
	aborted := make(chan time.Time, 1)
	pa, err := a.Admit(context.Background(), gateway.Write{Resource: "/r", Token: 5,
		Abort: func(cause error) {
			var sl *fencegate.SessionLostError
			if !errors.As(cause, &sl) {
				t.Errorf("abort cause %v, want SessionLostError", cause)
			}
			aborted <- time.Now()
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Release()
	// Its last renewal was answered before the cluster had stopped: the
	// proof ends at most a TTL after StopAll returns (a member's graceful
	// stop, a leader handing over, can take a while on etcd 3.7).
	c.StopAll()
	stopped := time.Now()
	select {
	case at := <-aborted:
		if d := at.Sub(stopped); d > 2*time.Second+500*time.Millisecond {
			t.Fatalf("aborted %s after the cluster went away; the lease TTL is 2s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write in flight not aborted with its lease unprovable")
	}
	if _, err := admit(a, "/r", 5); code(err) != fencegate.CodeFenceUnavailable {
		t.Fatalf("write with the cluster down: %v, want fence_unavailable", err)
	}
}

// Repeated tokens from many concurrent writers cost at most 0.25 etcd
// requests per write.
func TestSharedFenceRequestsPerWrite(t *testing.T) {
	requestsPerWrite(t, func(f *SharedFence) (gateway.Permit, error) { return admit(f, "/hot", 3) })
}

// TestSharedTreeRequestsPerWrite is TestSharedFenceRequestsPerWrite on a
// hierarchical key two levels below written collections: the marker Txn
// reads their records and below levels too, so a repeated token costs as
// little as on a key alone.
func TestSharedTreeRequestsPerWrite(t *testing.T) {
	requestsPerWrite(t, func(f *SharedFence) (gateway.Permit, error) {
		return f.AdmitTree(context.Background(), gateway.Write{Resource: "/dav/c/hot", Token: 3}, []string{"/dav", "/dav/c"})
	}, "/dav", "/dav/c")
}

// requestsPerWrite writes with admit (a repeated token) from 64 writers
// through two replicas, after the collections colls were written with the
// same token, and checks the etcd requests per write.
func requestsPerWrite(t *testing.T, admit func(f *SharedFence) (gateway.Permit, error), colls ...string) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	for _, coll := range colls {
		p, err := a.AdmitTree(context.Background(), gateway.Write{Resource: coll, Token: 3, Scope: gateway.ScopeTree}, resource.Parents(coll))
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	for _, f := range []*SharedFence{a, b} {
		p, err := admit(f)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	before := a.Requests() + b.Requests()
	const writers, each = 64, 50
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range writers {
		f := a
		if i%2 == 1 {
			f = b
		}
		wg.Go(func() {
			for range each {
				p, err := admit(f)
				if err != nil {
					failed.Add(1)
					continue
				}
				time.Sleep(time.Millisecond) // the forward
				p.Release()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d writes refused", n)
	}
	reqs := a.Requests() + b.Requests() - before
	per := float64(reqs) / (writers * each)
	t.Logf("%d etcd requests for %d writes: %.3f per write", reqs, writers*each, per)
	if per > 0.25 {
		t.Fatalf("%.3f etcd requests per write, want at most 0.25", per)
	}
}

// TestFenceContract runs the suite of every fence (internal/fencetest) on
// the etcd shared fence, as several replicas (each its own client and
// lease) on one three-member cluster, as adapters/postgres runs it on
// PostgreSQL.
func TestFenceContract(t *testing.T) {
	fencetest.Run(t, fencetest.Options{Replicas: true}, func(t *testing.T) fencetest.Open {
		c := newCluster(t)
		return c.open(c.prefix, SharedFenceOptions{LeaseTTL: 2 * time.Second, ForwardTimeout: 2 * time.Second})
	})
}

// open is the fencetest.Open of replicas on c under prefix.
func (c *testCluster) open(prefix string, opts SharedFenceOptions) fencetest.Open {
	return func(t *testing.T) (gateway.Fence, func()) {
		st, err := OpenStore(StoreOptions{Client: ClientOptions{Endpoints: c.Endpoints}, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		f := NewSharedFence(st, opts)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		return f, func() { once.Do(func() { f.Close(); st.Close() }) }
	}
}

// The export/import contract of `fencegate fence export` and `import`
// (internal/fencetest) on the etcd store, which keeps no lease records.
func TestExportImport(t *testing.T) {
	c := newCluster(t)
	fencetest.RunExportImport(t, c.store(t), nil)
}

// ListFences pages by key: a prefix, and after the last key of a page.
func TestListFences(t *testing.T) {
	c := newCluster(t)
	st := c.store(t)
	ctx := context.Background()
	for i, r := range []string{"/a/1", "/a/2", "/a/3", "/b/1"} {
		if _, err := st.AdvanceFence(ctx, r, int64(i+1), ""); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for {
		page, err := st.ListFences(ctx, "/a/", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			got = append(got, fmt.Sprintf("%s@%d", p.Resource, p.Highest))
		}
		after = page[len(page)-1].Resource
	}
	if want := "[/a/1@1 /a/2@2 /a/3@3]"; fmt.Sprint(got) != want {
		t.Fatalf("pages: %v; want %s", got, want)
	}
}

// While a write holds its permit, its marker exists in etcd: writes
// joining, leaving and re-joining a marker as its idle delete goes out
// (idle 2ms) never hold a permit without one. A write that joined a marker
// whose delete was in flight was admitted with none before.
func TestMarkerHeldWhilePermitted(t *testing.T) {
	c := newCluster(t)
	f := c.replica(t, SharedFenceOptions{MarkerIdle: 2 * time.Millisecond, MarkerLinger: -1})
	p, err := admit(f, "/r", 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	cli := c.client(t)
	key := f.markerKey("/r", 1, f.Lease())
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	var checks, missing atomic.Int64
	for w := range 3 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				p, err := admit(f, "/r", 1)
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				resp, err := cli.Get(context.Background(), key, clientv3.WithCountOnly())
				if err == nil {
					checks.Add(1)
					if resp.Count != 1 {
						missing.Add(1)
					}
				}
				p.Release()
				time.Sleep(time.Duration((w*3+i)%7) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	t.Logf("%d checks of a held marker", checks.Load())
	if n := missing.Load(); n > 0 {
		t.Fatalf("%d of %d writes held a permit while their marker did not exist", n, checks.Load())
	}
}

// Compaction keeps only the latest revision of each key: the fences are
// those, so they survive it, and drains go on after it.
func TestFencesSurviveCompaction(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	for tok := int64(1); tok <= 5; tok++ {
		p, err := admit(a, "/c", tok)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	pa, err := admit(a, "/c", 5)
	if err != nil {
		t.Fatal(err)
	}
	cli := c.client(t)
	resp, err := cli.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if r := c.stored(t, "/c"); r.Highest != 5 || !r.Ready {
		t.Fatalf("record after compaction: %+v", r)
	}
	done := make(chan error, 1)
	go func() {
		p, err := admit(b, "/c", 6)
		if err == nil {
			p.Release()
		}
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("token 6 decided while 5 in flight, after compaction: %v", err)
	default:
	}
	pa.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := admit(a, "/c", 5); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 5 after 6, after compaction: %v", err)
	}
}

// An advance with nothing older in flight costs four requests: the marker
// Txn (put and read), the compare-and-raise carrying the delete of this
// replica's idle older marker and the drain's read, the ready
// compare-and-set, and the marker Txn that admits the write.
func TestSharedFenceRequestsPerAdvance(t *testing.T) {
	c := newCluster(t)
	// Renewals are few with a 10s lease; the count is the writes'.
	a := c.replica(t, SharedFenceOptions{LeaseTTL: 10 * time.Second})
	before := a.Requests()
	const n = 50
	for tok := int64(1); tok <= n; tok++ {
		p, err := admit(a, "/adv", tok)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	per := float64(a.Requests()-before) / n
	t.Logf("%.2f etcd requests per advance", per)
	if per > 4.2 {
		t.Fatalf("%.2f etcd requests per advance; want at most 4", per)
	}
}

// TestTreeContract runs the hierarchical-keys suite of every shared fence
// (internal/fencetest.RunTree) on etcd, as two replicas (each its own
// client and lease) on one three-member cluster, each subtest under a
// prefix of its own, as adapters/postgres runs it on PostgreSQL.
func TestTreeContract(t *testing.T) {
	c := newCluster(t)
	n := 0
	fencetest.RunTree(t, func(t *testing.T) fencetest.Open {
		n++
		return c.open(fmt.Sprintf("/tree%d", n), SharedFenceOptions{LeaseTTL: 2 * time.Second, DrainTimeout: 10 * time.Second, ForwardTimeout: 20 * time.Second})
	})
}

// TestSharedFenceJoinNotBehindPut: a write that joins a marker already
// put needs only a read, which does not wait for a Txn that puts another
// key's marker (a commit to etcd's log) to come back. The put of /cold's
// marker is held up; the writes of /hot, whose marker lingers, are still
// admitted, each with its marker in etcd.
func TestSharedFenceJoinNotBehindPut(t *testing.T) {
	c := newCluster(t)
	f := c.replica(t, SharedFenceOptions{MarkerIdle: time.Minute, MarkerLinger: -1})
	for deadline := time.Now().Add(10 * time.Second); f.watchGen.Load()%2 == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fence watch is not up after 10s")
		}
	}
	p, err := admit(f, "/hot", 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Release() // the marker lingers

	cold := f.markerDir("/cold")
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(then []clientv3.Op) {
		for _, op := range then {
			if op.IsPut() && strings.HasPrefix(string(op.KeyBytes()), cold) {
				once.Do(func() { close(entered) })
				select {
				case <-unblock:
				case <-time.After(20 * time.Second):
				}
				return
			}
		}
	}
	testHookMarkerTxn.Store(&hook)
	t.Cleanup(func() { testHookMarkerTxn.Store(nil) })
	var released sync.Once
	release := func() { released.Do(func() { close(unblock) }) }
	defer release()

	coldDone := make(chan error, 1)
	go func() {
		p, err := admit(f, "/cold", 1)
		if err == nil {
			p.Release()
		}
		coldDone <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the put of /cold's marker was not sent within 10s")
	}

	cli := c.client(t)
	hotKey := f.markerKey("/hot", 1, f.Lease())
	for i := range 5 {
		got := make(chan error, 1)
		var hp gateway.Permit
		go func() {
			var err error
			hp, err = admit(f, "/hot", 1)
			got <- err
		}()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("write %d of /hot: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			release()
			<-got
			t.Fatalf("write %d of /hot (its marker lingering) still waiting 5s behind the put of /cold's marker", i)
		}
		resp, err := cli.Get(context.Background(), hotKey, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 1 {
			t.Fatalf("write %d of /hot admitted while its marker %q is not in etcd", i, hotKey)
		}
		hp.Release()
	}
	release()
	if err := <-coldDone; err != nil {
		t.Fatalf("/cold: %v", err)
	}
	if r := c.stored(t, "/cold"); r.Highest != 1 || !r.Ready {
		t.Fatalf("/cold's record in etcd: %+v, want highest 1, ready", r)
	}
}
