package etcd

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/fencetest"
)

// Attacks on the join (a repeated token admitted from memory): each one
// tries to have a replica admit a write without its marker in etcd, or
// after the fence moved on, and checks etcd's durable state.

// replyGate is a TCP proxy to one etcd member whose answers (server to
// client) can be held: a request sent meanwhile is applied by etcd, and
// its client sees only its own deadline pass, the outcome unknown to it.
type replyGate struct {
	addr string
	mu   sync.Mutex
	open chan struct{} // closed while answers flow
}

func newReplyGate(t *testing.T, endpoint string) *replyGate {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	g := &replyGate{addr: u.Scheme + "://" + ln.Addr().String(), open: make(chan struct{})}
	close(g.open)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			go func() { io.Copy(up, c); up.Close() }()
			go g.down(c, up)
		}
	}()
	return g
}

// down copies the member's answers to the client, each chunk once the
// gate is open (held, never dropped: the HTTP/2 stream stays whole).
func (g *replyGate) down(c, up net.Conn) {
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			g.mu.Lock()
			open := g.open
			g.mu.Unlock()
			<-open
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (g *replyGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *replyGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// gatedReplica starts a replica whose client reaches the cluster through
// a replyGate to its first member.
func (c *testCluster) gatedReplica(t *testing.T, opts SharedFenceOptions, timeout time.Duration) (*SharedFence, *replyGate) {
	t.Helper()
	g := newReplyGate(t, c.Endpoints[0])
	t.Cleanup(g.release)
	st, err := OpenStore(StoreOptions{Client: ClientOptions{Endpoints: []string{g.addr}}, Prefix: c.prefix, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := NewSharedFence(st, opts)
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return f, g
}

// notAdmittedWhile fails t if admit returns within hold while an older
// write is in flight (I2), then releases it and wants admit to succeed.
func notAdmittedWhile(t *testing.T, older gateway.Permit, what string, admit func() (gateway.Permit, error)) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		p, err := admit()
		if err == nil {
			p.Release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Errorf("%s decided (%v) while the older write is in flight (I2)", what, err)
		older.Release()
		return
	case <-time.After(time.Second):
	}
	older.Release()
	if err := <-done; err != nil {
		t.Fatalf("%s after the older write ended: %v", what, err)
	}
}

// lingering starts a cluster and two replicas, A (with opts) and B, and
// has A write res at token once: A's marker of it lingers, its record read
// at token and ready, so A's next write of token joins it.
func lingering(t *testing.T, opts SharedFenceOptions, res string, token int64) (c *testCluster, a, b *SharedFence) {
	t.Helper()
	c = newCluster(t)
	a = c.replica(t, opts)
	b = c.replica(t, SharedFenceOptions{})
	waitWatch(t, a)
	waitWatch(t, b)
	p, err := admit(a, res, token)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	return c, a, b
}

// wantStored fails t unless res's record in etcd is at highest, ready or
// not.
func (c *testCluster) wantStored(t *testing.T, res string, highest int64, ready bool) {
	t.Helper()
	if rec := c.stored(t, res); rec.Highest != highest || rec.Ready != ready {
		t.Fatalf("%s's record in etcd: %+v, want highest %d, ready %v", res, rec, highest, ready)
	}
}

// The delete of an idle marker is sent, etcd applies it, and its answer
// is lost (a leader change, a connection cut: the Txn fails after its
// deadline, outcome unknown). The replica must not count on the marker
// any more: the next write of its token puts it again, so a newer
// token's drain on another replica waits for that write (I2).
func TestSharedFenceJoinAfterUnsureMarkerDelete(t *testing.T) {
	c := newCluster(t)
	a, gate := c.gatedReplica(t, SharedFenceOptions{LeaseTTL: 10 * time.Second, MarkerIdle: time.Minute}, time.Second)
	b := c.replica(t, SharedFenceOptions{})
	waitWatch(t, a)
	p, err := admit(a, "/k", 5)
	if err != nil {
		t.Fatal(err)
	}
	p.Release() // idle, read at 5 and ready: the next write of 5 would join
	mkey := a.markerKey("/k", 5, a.Lease())
	var held atomic.Bool
	hook := func(then []clientv3.Op) {
		for _, op := range then {
			if op.IsDelete() && string(op.KeyBytes()) == mkey && held.CompareAndSwap(false, true) {
				gate.hold() // etcd applies the delete; its answer is held
			}
		}
	}
	testHookMarkerTxn.Store(&hook)
	t.Cleanup(func() { testHookMarkerTxn.Store(nil) })
	a.dropIdle(time.Now()) // as markerIdle passing: the delete goes out
	// The delete is applied while its answer is held ...
	for deadline := time.Now().Add(10 * time.Second); !held.Load() || c.markerCount(t, a, "/k", 5) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle marker's delete did not reach etcd within 10s")
		}
	}
	// ... until its Txn fails (the store timeout, 1s).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.mu.Lock()
		e := a.sess.entries[mkey]
		sent := e != nil && e.deleteSent
		a.mu.Unlock()
		if !sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the marker's delete still in flight 10s later")
		}
	}
	testHookMarkerTxn.Store(nil)
	gate.release()
	pa, err := admit(a, "/k", 5)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.markerCount(t, a, "/k", 5); n != 1 {
		t.Errorf("A's write of 5 admitted while its marker is not in etcd (%d markers)", n)
	}
	notAdmittedWhile(t, pa, "B's write of 6", func() (gateway.Permit, error) { return admit(b, "/k", 6) })
	c.wantStored(t, "/k", 6, true)
}

// An import (`fence import`, max-merging a record above the one stored)
// raises the record but, unlike an operator's Advance, returns without
// waiting for the markers of older tokens: a replica whose watch has not
// brought it may still join its marker of the older token. That write
// must still be ordered before the imported token's: the first write of
// 9 drains it (I2), and the older token is refused once 9 was admitted
// (I1).
func TestSharedFenceJoinAfterImportOrderedBeforeImported(t *testing.T) {
	// The idle marker goes within markerIdle though the watch never
	// brings the import (held): the drain of 9 waits that long at most.
	c, a, b := lingering(t, SharedFenceOptions{}, "/h", 3)
	release := holdWatch(t, a, "/h")
	n, err := c.store(t).ImportFences(context.Background(), []fencegate.FenceRecord{{Resource: "/h", Highest: 9, Owner: "import"}})
	if err != nil || n != 1 {
		t.Fatalf("import /h at 9: %d raised, %v", n, err)
	}
	c.wantStored(t, "/h", 9, false)
	pa, err := admit(a, "/h", 3)
	switch {
	case code(err) == fencegate.CodeStaleToken:
		t.Log("token 3 refused once the import returned")
	case err != nil:
		t.Fatalf("token 3 on A after the import: %v", err)
	default:
		t.Log("token 3 admitted on A after the import to 9 returned (its watch lags): ordered by the drain of 9")
		if n := c.markerCount(t, a, "/h", 3); n != 1 {
			t.Fatalf("A's write of 3 admitted while its marker is not in etcd (%d markers)", n)
		}
		notAdmittedWhile(t, pa, "B's write of 9", func() (gateway.Permit, error) { return admit(b, "/h", 9) })
	}
	release()
	if _, err := admit(b, "/h", 9); err != nil {
		t.Fatal(err)
	}
	if _, err := admit(a, "/h", 3); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 3 on A after a write of 9: %v, want stale", err)
	}
	c.wantStored(t, "/h", 9, true)
}

// A fence record replaced by a value no replica can decode (a bad
// restore, a hand edit): a write that reads it is refused
// fence_unavailable (I4), and so must be one that would join on what the
// watch brought, which is that value.
func TestSharedFenceJoinRefusedWhenRecordUndecodable(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{MarkerIdle: time.Minute})
	waitWatch(t, a)
	p, err := admit(a, "/u", 4)
	if err != nil {
		t.Fatal(err)
	}
	p.Release() // lingers, read at 4 and ready
	seen := make(chan struct{}, 1)
	hook := func(ev *clientv3.Event) {
		if string(ev.Kv.Key) == a.fenceKey("/u") {
			select {
			case seen <- struct{}{}:
			default:
			}
		}
	}
	testHookWatched.Store(&hook)
	t.Cleanup(func() { testHookWatched.Store(nil) })
	if _, err := c.client(t).Put(context.Background(), a.fenceKey("/u"), "not a record"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("A's watch did not bring the change of /u's record within 10s")
	}
	// (The hook runs before the event is handled: give it the moment.)
	time.Sleep(50 * time.Millisecond)
	if p, err := admit(a, "/u", 4); code(err) != fencegate.CodeFenceUnavailable {
		if err == nil {
			p.Release()
		}
		t.Fatalf("A's write of 4 with /u's record undecodable in etcd: %v, want fence_unavailable", err)
	}
}

// A replica that joins while etcd answers none of its requests (they
// arrive, their answers do not: a one-way partition) admits from what its
// watch last brought, which is only lag: its lease is renewed by requests
// it cannot prove, so it aborts the joined write once the lease is
// unprovable (or its forward timeout passes), refuses writes from then on,
// and another replica's newer token waits for the marker, then the lost
// lease's forward timeout: it is admitted no earlier than the joined
// write's forward could have ended (I2).
func TestSharedFenceJoinWhileEtcdUnanswered(t *testing.T) {
	const ft = time.Second
	c := newCluster(t)
	a, gate := c.gatedReplica(t, SharedFenceOptions{LeaseTTL: 2 * time.Second, ForwardTimeout: ft, MarkerIdle: time.Minute}, time.Second)
	b := c.replica(t, SharedFenceOptions{ForwardTimeout: ft})
	waitWatch(t, a)
	p, err := admit(a, "/p", 5)
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	gate.hold()
	aborted := make(chan time.Time, 1)
	joins := a.joins.Load()
	admitted := time.Now()
	pa, err := a.Admit(context.Background(), gateway.Write{Resource: "/p", Token: 5,
		Abort: func(error) { aborted <- time.Now() }})
	if err != nil {
		t.Fatalf("A's write of 5 with etcd unanswered, lease still proven: %v (want joined)", err)
	}
	defer pa.Release()
	if a.joins.Load() != joins+1 {
		t.Fatal("A's write was not a join")
	}
	if n := c.markerCount(t, a, "/p", 5); n != 1 {
		t.Fatalf("A's write of 5 joined while its marker is not in etcd (%d markers)", n)
	}
	done := make(chan time.Time, 1)
	go func() {
		p, err := admit(b, "/p", 6)
		if err != nil {
			t.Errorf("B's write of 6: %v", err)
		} else {
			p.Release()
		}
		done <- time.Now()
	}()
	var abortedAt time.Time
	select {
	case abortedAt = <-aborted:
	case <-time.After(15 * time.Second):
		t.Fatal("A's joined write not aborted within 15s of its answers stopping (lease TTL 2s)")
	}
	// (The forward timeout, 1s, cut the write first.) Once the lease is
	// unprovable, nothing joins.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a.mu.Lock()
		s := a.sess
		a.mu.Unlock()
		if s == nil || !s.proven() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's lease still proven 15s after its answers stopped (TTL 2s)")
		}
	}
	if _, err := admit(a, "/p", 5); code(err) != fencegate.CodeFenceUnavailable {
		t.Errorf("A's write of 5 once its lease is unprovable: %v, want fence_unavailable", err)
	}
	at := <-done
	if at.Before(abortedAt) || at.Sub(admitted) < ft {
		t.Fatalf("B's write of 6 admitted %s after A's joined write of 5 (aborted after %s); want after the abort and at least the forward timeout %s",
			at.Sub(admitted), abortedAt.Sub(admitted), ft)
	}
	c.wantStored(t, "/p", 6, true)
	gate.release()
}

// Three replicas, their watches lagging 0-30 ms per event, writers of
// repeated and rising tokens (most of them joins) and an operator
// advancing the keys at random through any replica: no write is admitted
// while an older token's write of a related key (the same key, a
// collection above it or a key below it) is in flight (I2), none below a
// token a related key admitted (I1), and none below a token whose Advance
// of a related key had returned before the write asked (the Advance's
// promise, which a join could break: it admits from memory).
func TestSharedFenceJoinsUnderAdvancesLagging(t *testing.T) {
	key := func(f *SharedFence, k string, tok int64) (gateway.Permit, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return f.Admit(ctx, gateway.Write{Resource: k, Token: tok, DrainTimeout: 5 * time.Second})
	}
	member := func(f *SharedFence, k string, tok int64) (gateway.Permit, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return f.AdmitTree(ctx, gateway.Write{Resource: k, Token: tok, DrainTimeout: 5 * time.Second}, []string{"/t/c"})
	}
	coll := func(f *SharedFence, k string, tok int64) (gateway.Permit, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return f.AdmitTree(ctx, gateway.Write{Resource: k, Token: tok, Scope: gateway.ScopeTree, DrainTimeout: 5 * time.Second}, nil)
	}
	lagWatch(t)
	c := newCluster(t)
	fs := []*SharedFence{c.replica(t, SharedFenceOptions{}), c.replica(t, SharedFenceOptions{}), c.replica(t, SharedFenceOptions{})}
	for _, f := range fs {
		waitWatch(t, f)
	}
	for _, tc := range []struct {
		name  string
		keys  []string
		admit []func(f *SharedFence, k string, tok int64) (gateway.Permit, error)
	}{
		{"keys", []string{"/j/0", "/j/1", "/j/2"}, []func(*SharedFence, string, int64) (gateway.Permit, error){key, key, key}},
		{"tree", []string{"/t/c", "/t/c/k0", "/t/c/k1"}, []func(*SharedFence, string, int64) (gateway.Permit, error){coll, member, member}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			joinStress(t, c, fs, tc.keys, tc.admit)
		})
	}
}

func joinStress(t *testing.T, c *testCluster, fs []*SharedFence, keys []string, admit []func(f *SharedFence, k string, tok int64) (gateway.Permit, error)) {
	joins := func() (n int64) {
		for _, f := range fs {
			n += f.joins.Load()
		}
		return n
	}
	joined := joins()
	type write struct {
		key   string
		token int64
	}
	type floor struct {
		write
		at time.Time // the Advance returned
	}
	var mu sync.Mutex
	var accepted []write // each key's highest admitted, as a list
	inflight := map[write]int{}
	var floors []floor
	start := time.Now()
	deadline := start.Add(2 * time.Second)
	window := func(rng *rand.Rand, n int) int64 {
		return 1 + int64(time.Since(start)/(100*time.Millisecond)) + int64(rng.IntN(n))
	}
	var wg sync.WaitGroup
	var admitted, refused, advances atomic.Int64
	for w := range 9 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for time.Now().Before(deadline) {
				i := rng.IntN(len(keys))
				wr := write{keys[i], window(rng, 3)}
				asked := time.Now()
				p, err := admit[i](fs[rng.IntN(len(fs))], wr.key, wr.token)
				if err != nil {
					if cd := code(err); cd != fencegate.CodeStaleToken && cd != fencegate.CodeFenceDraining {
						t.Errorf("%s@%d: %v", wr.key, wr.token, err)
						return
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				mu.Lock()
				for _, o := range accepted {
					if fencetest.Related(o.key, wr.key) && wr.token < o.token {
						t.Errorf("%s@%d admitted after %s@%d (I1)", wr.key, wr.token, o.key, o.token)
					}
				}
				for o := range inflight {
					if fencetest.Related(o.key, wr.key) && o.token < wr.token {
						t.Errorf("%s@%d admitted while %s@%d in flight (I2)", wr.key, wr.token, o.key, o.token)
					}
				}
				for _, fl := range floors {
					if fencetest.Related(fl.key, wr.key) && wr.token < fl.token && asked.After(fl.at) {
						t.Errorf("%s@%d admitted, asked %s after an Advance of %s to %d had returned", wr.key, wr.token, asked.Sub(fl.at), fl.key, fl.token)
					}
				}
				accepted = append(accepted, wr)
				inflight[wr]++
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				mu.Lock()
				if inflight[wr]--; inflight[wr] == 0 {
					delete(inflight, wr)
				}
				mu.Unlock()
				p.Release()
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(99, 9))
		for time.Now().Before(deadline) {
			time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
			wr := write{keys[rng.IntN(len(keys))], 1 + window(rng, 2)}
			began := time.Now()
			st, err := fs[rng.IntN(len(fs))].Advance(context.Background(), wr.key, wr.token, "op")
			if err == nil && st.Highest < wr.token {
				t.Errorf("advance %s to %d returned %+v", wr.key, wr.token, st)
			}
			if err != nil {
				t.Errorf("advance %s to %d: %v", wr.key, wr.token, err)
				return
			}
			advances.Add(1)
			if time.Since(began) >= 20*time.Second {
				continue // past the drain timeout: it promises nothing
			}
			// The promise is for the token asked: st, read after the
			// markers, may show a writer's raise above it, whose own
			// drain orders the writes of the tokens between.
			mu.Lock()
			floors = append(floors, floor{wr, time.Now()})
			mu.Unlock()
		}
	})
	wg.Wait()
	t.Logf("%d admitted (%d joins), %d refused, %d advances", admitted.Load(), joins()-joined, refused.Load(), advances.Load())
	if admitted.Load() == 0 || refused.Load() == 0 || joins() == joined || advances.Load() == 0 {
		t.Fatal("the run did not exercise joins, refusals and advances")
	}
	for _, wr := range accepted {
		if rec := c.stored(t, wr.key); rec.Highest < wr.token {
			t.Errorf("%s's record in etcd: %+v, below the token %d admitted", wr.key, rec, wr.token)
		}
	}
}

// A collection's first write scans the members into the level below
// (known) before it waits for the markers below. A second write of the
// collection's token that reads the record then must not be admitted
// while a member write of an older token is still in flight (I2 across
// the hierarchy): found by TestSharedFenceJoinsUnderAdvancesLagging/tree,
// when the first record was created ready.
func TestSharedFenceSecondCollectionWriteWaitsForMembers(t *testing.T) {
	c := newCluster(t)
	a := c.replica(t, SharedFenceOptions{})
	b := c.replica(t, SharedFenceOptions{})
	pm, err := treeWrite(a, "/c/k", 1, gateway.ScopeKey, "/c")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		p, err := treeWrite(b, "/c", 3, gateway.ScopeTree)
		if err == nil {
			p.Release()
		}
		done <- err
	}()
	cli := c.client(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := cli.Get(context.Background(), b.belowKey("/c"))
		if err != nil {
			t.Fatal(err)
		}
		if l, _, err := decodeLevel(first(resp.Kvs)); err == nil && l.Known {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first write of /c did not scan its members within 10s")
		}
	}
	if rec := c.stored(t, "/c"); rec.Highest != 3 {
		t.Fatalf("/c's record in etcd: %+v, want highest 3", rec)
	}
	notAdmittedWhile(t, pm, "a second write of /c at 3", func() (gateway.Permit, error) { return treeWrite(a, "/c", 3, gateway.ScopeTree) })
	if err := <-done; err != nil {
		t.Fatalf("the first write of /c at 3: %v", err)
	}
}
