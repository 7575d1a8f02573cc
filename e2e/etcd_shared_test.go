package e2e

// Fence mode shared on store.etcd: real fencegate processes over a real
// three-member etcd cluster, in front of a recording upstream whose history
// is the durable state the invariants are checked on. The contract tests of
// shared_test.go run here on etcd (drainAcrossReplicas, olderLandsFirst),
// with etcd's own faults: a replica killed, its link to etcd cut, the etcd
// leader killed, the whole cluster restarted, a replica paused past its
// lease's TTL.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// etcdSharedYAML is one replica in fence mode shared on the etcd cluster
// of endpoints, with a 3s upstream timeout (the forward timeout a drain
// waits for a lost replica's writes is the 4s drain timeout) and a 2s
// lease.
func etcdSharedYAML(endpoints []string, upstream string) string {
	return etcdSharedYAMLTimeout(endpoints, upstream, 3*time.Second)
}

// etcdSharedYAMLTimeout is etcdSharedYAML with the route's upstream
// timeout.
func etcdSharedYAMLTimeout(endpoints []string, upstream string, timeout time.Duration) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: %s}
      resource: "{path}"
      hierarchical: false
store:
  etcd: {endpoints: [%s], prefix: /fg, lease_ttl: 2s, timeout: 2s}
fence: {mode: shared}
admin: {listen: $ADMIN}
`, upstream, timeout, quoteList(endpoints))
}

// etcdRecord reads resource's fence record straight from etcd.
func etcdRecord(t *testing.T, endpoints []string, resource string) string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/fg/f/"+resource)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// leaderOf returns the index of c's leader.
func leaderOf(t *testing.T, c *testenv.EtcdCluster) int {
	t.Helper()
	return etcdLeader(t, etcdClient(t, c.Endpoints...), c.Endpoints)
}

// Two replicas: B's write through replica 1, then A's stale write through
// replica 2 is refused; the record in etcd holds B's token.
func TestEtcdSharedStaleRefused(t *testing.T) {
	c := testenv.Etcd(t, 3)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, etcdSharedYAML(c.Endpoints, up.url))
	staleAcrossReplicas(t, r, up)
	if rec := etcdRecord(t, c.Endpoints, "/orders/7"); !strings.Contains(rec, `"h":42,`) {
		t.Fatalf("etcd record %s; want highest 42", rec)
	}
}

// The drain across replicas of shared_test.go, on etcd.
func TestEtcdSharedDrainAcrossReplicas(t *testing.T) {
	c := testenv.Etcd(t, 3)
	up := newSharedUpstream(t)
	drainAcrossReplicas(t, up, sharedReplicas(t, 2, etcdSharedYAML(c.Endpoints, up.url)))
}

// The randomized run of shared_test.go (zombies, replicas killed and
// restarted, Porcupine on the answers), on etcd.
func TestEtcdSharedRandomized(t *testing.T) {
	c := testenv.Etcd(t, 3)
	up := newSharedUpstream(t)
	sharedRandomized(t, up, sharedReplicas(t, 2, etcdSharedYAML(c.Endpoints, up.url)))
}

// An older write is at the upstream through replica 1 (its body sent
// whole, the upstream slow to apply it) when replica 1 is killed, its link
// to etcd is cut, the etcd leader is killed, or the whole cluster
// restarts; a newer write through replica 2 is retried until it lands, and
// the upstream's order proves the older one landed first.
func TestEtcdSharedOlderLandsFirst(t *testing.T) {
	same := func(eps []string) func(string) [2]string {
		return func(up string) [2]string { return [2]string{etcdSharedYAML(eps, up), etcdSharedYAML(eps, up)} }
	}
	t.Run("kill9", func(t *testing.T) {
		c := testenv.Etcd(t, 3)
		olderLandsFirst(t, same(c.Endpoints), func(r []*Proc) { r[0].Kill9() })
	})
	t.Run("cut_link", func(t *testing.T) {
		c := testenv.Etcd(t, 3)
		tp := testenv.Toxiproxy(t)
		var via []string
		var proxies []*testenv.Proxy
		for i, ep := range c.Endpoints {
			u, err := url.Parse(ep)
			if err != nil {
				t.Fatal(err)
			}
			px := tp.Proxy(t, fmt.Sprintf("etcd%d", i), u.Host)
			proxies = append(proxies, px)
			via = append(via, "http://"+px.Listen)
		}
		olderLandsFirst(t, func(up string) [2]string {
			return [2]string{etcdSharedYAML(via, up), etcdSharedYAML(c.Endpoints, up)}
		}, func([]*Proc) {
			for _, px := range proxies {
				px.AddToxic(t, testenv.Toxic{Name: "cut_down", Type: "timeout", Attributes: map[string]any{"timeout": 0}})
				px.AddToxic(t, testenv.Toxic{Name: "cut_up", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}})
			}
		})
	})
	t.Run("leader_killed", func(t *testing.T) {
		c := testenv.Etcd(t, 3)
		olderLandsFirst(t, same(c.Endpoints), func([]*Proc) { c.Kill(leaderOf(t, c)) })
	})
	t.Run("cluster_restart", func(t *testing.T) {
		c := testenv.Etcd(t, 3)
		olderLandsFirst(t, same(c.Endpoints), func([]*Proc) {
			c.StopAll()
			// In the background, while the newer write waits for the
			// cluster; the test's end waits for it (this cleanup runs
			// before the cluster's own), so a member that did not come
			// back fails the test rather than a finished one.
			restarted := make(chan struct{})
			t.Cleanup(func() { <-restarted })
			go func() {
				defer close(restarted)
				c.RestartAll()
			}()
		})
	})
}

// A replica paused (SIGSTOP) past its lease's TTL with a write whose body
// it was still streaming, and resumed well within the route's upstream
// timeout and the forward timeout (10s, from the route): neither timeout
// can stop the write, only the fence's proof that the lease is alive
// (LivePermit, and the abort of the lease's writes). Resumed with the rest
// of the body waiting in its socket, the replica sends none of it; the
// newer write through replica 2 lands once the lost replica's forward
// timeout passed, and the upstream's record holds no part of the paused
// write: it never lands after the newer one, nor at all, as its lease could
// not be proven.
func TestEtcdSharedPausedReplica(t *testing.T) {
	const timeout = 10 * time.Second // the route's upstream timeout: longer than the pause
	c := testenv.Etcd(t, 3)
	cli := etcdClient(t, c.Endpoints...)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, etcdSharedYAMLTimeout(c.Endpoints, up.url, timeout))
	const key = "/orders/p"
	if st, body := write(t, "PUT", r[0].URL("gateway")+key, "1", "A0"); st != 200 {
		t.Fatalf("A's first write: %d %s", st, body)
	}
	arrived := make(chan struct{})
	var once sync.Once
	up.hold = func(req *http.Request) {
		if req.Header.Get("X-Test") == "paused" {
			once.Do(func() { close(arrived) })
		}
	}
	pr, pw := io.Pipe()
	aDone := make(chan string, 1)
	sent := time.Now() // before A's permit starts its forward timeout
	go func() {
		req, _ := http.NewRequest("PUT", r[0].URL("gateway")+key, pr)
		req.ContentLength = -1 // streamed
		req.Header.Set("Fencing-Token", "1")
		req.Header.Set("X-Test", "paused")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			aDone <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		aDone <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	pw.Write([]byte("A1-first-half;"))
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("A's write did not reach the upstream")
	}
	lease := markerLease(t, cli, "orders") // replica 1's: A's marker hangs on it
	r[0].Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			r[0].Signal(syscall.SIGCONT)
		}
	}()
	// The pause lasts until etcd itself has expired replica 1's lease:
	// past the TTL by the store's clock, not by a guess of how long that
	// takes on a loaded machine.
	waitLeaseGone(t, cli, lease, 30*time.Second)
	paused := time.Since(sent)
	t.Logf("etcd expired replica 1's lease %x %s after A was sent (lease TTL 2s)", lease, paused.Round(time.Millisecond))
	// The rest of A's body waits in replica 1's socket when it resumes (if
	// some of it is still on its way then, it is read after the resume and
	// meets the same check).
	go func() {
		pw.Write([]byte("second-half"))
		pw.Close()
	}()
	time.Sleep(200 * time.Millisecond)
	if paused > timeout-2*time.Second {
		t.Fatalf("inconclusive: the pause took %s, too close to the %s upstream and forward timeout to prove that the lease's proof alone stops the write", paused, timeout)
	}
	r[0].Signal(syscall.SIGCONT)
	stopped = false
	select {
	case a := <-aDone:
		t.Logf("A after the pause: %s", a)
		if strings.HasPrefix(a, "200 ") {
			t.Errorf("A's write answered %s after its replica's lease expired; want it cut", a)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("A not answered after the replica resumed")
	}
	start := time.Now()
	landThrough(t, r[1].URL("gateway")+key, "2", "B", start.Add(timeout+45*time.Second))
	t.Logf("B landed %s after A was answered (lost replica's forward timeout %s)", time.Since(start).Round(time.Millisecond), timeout)
	h := up.rec.HistoryOf(key)
	sharedCheckHistory(t, h)
	if got, want := recorder.Summary(h), "PUT A0@1, PUT B@2"; got != want {
		t.Fatalf("upstream applied %q; want %q (the paused write must not land: its lease was not proven)", got, want)
	}
}

// markerLease returns the one lease etcd holds with a key attached that
// contains word (a marker's key names its resource).
func markerLease(t *testing.T, cli *clientv3.Client, word string) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found []clientv3.LeaseID
	for _, l := range resp.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ttl.Keys, func(k []byte) bool { return strings.Contains(string(k), word) }) {
			found = append(found, l.ID)
		}
	}
	if len(found) != 1 {
		t.Fatalf("leases with a key of %q attached: %x; want one", word, found)
	}
	return found[0]
}

// waitLeaseGone waits (bounded by within) until etcd no longer holds
// lease.
func waitLeaseGone(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ttl, err := cli.TimeToLive(ctx, lease)
		cancel()
		if err == nil && ttl.TTL == -1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd still holds lease %x after %s (%v)", lease, within, err)
		}
	}
}

// Writers with random tokens through both replicas while a fault strikes:
// the etcd leader killed and brought back, a replica killed (kill -9) and
// restarted, the whole cluster stopped and started. Porcupine checks the
// answers against a fenced register, the upstream's applied order never
// goes back, and the time until a repeated token is served again is
// measured (from the new leader's election; from when the restarted
// replica listens, or the restarted cluster is healthy): at most 2s.
func TestEtcdSharedLinearizable(t *testing.T) {
	t.Run("leader_killed", func(t *testing.T) {
		etcdLinearizable(t, 2*time.Second, func(c *testenv.EtcdCluster, r []*Proc) (time.Time, int) {
			cli := etcdClient(t, c.Endpoints...)
			leader := etcdLeader(t, cli, c.Endpoints)
			was := leaderID(t, cli, c.Endpoints[leader])
			c.Kill(leader)
			at := time.Now()
			// Recovery is measured from the new leader's election: the
			// election is etcd's time (seconds on a loaded machine).
			elected := electedAfter(t, cli, c.Endpoints, leader, was)
			t.Logf("a new leader was elected %s after the kill", elected.Sub(at).Round(time.Millisecond))
			// The old leader comes back while the writes go on, started
			// from the test's goroutine: a restart left running in the
			// background raced the test's end (its member stopped by the
			// cleanup read as one that did not come back).
			c.Restart(leader)
			return elected, -1
		})
	})
	t.Run("replica_kill9", func(t *testing.T) {
		etcdLinearizable(t, 2*time.Second, func(c *testenv.EtcdCluster, r []*Proc) (time.Time, int) {
			r[0].Kill9()
			time.Sleep(time.Second)
			r[0].Restart()
			return time.Now(), 0
		})
	})
	t.Run("cluster_restart", func(t *testing.T) {
		etcdLinearizable(t, 2*time.Second, func(c *testenv.EtcdCluster, r []*Proc) (time.Time, int) {
			c.StopAll()
			time.Sleep(time.Second)
			c.RestartAll()
			return time.Now(), -1
		})
	})
}

// etcdLinearizable runs the writers, strikes with fault after 2s (which
// returns when to measure recovery from, and through which replica, -1:
// any), and checks the history; recovery must take at most within.
func etcdLinearizable(t *testing.T, within time.Duration, fault func(c *testenv.EtcdCluster, r []*Proc) (time.Time, int)) {
	c := testenv.Etcd(t, 3)
	etcdLinearizableOn(t, c.Endpoints, within, func(r []*Proc) (time.Time, int) { return fault(c, r) })
}

// etcdLinearizableOn is etcdLinearizable on the cluster of endpoints.
func etcdLinearizableOn(t *testing.T, endpoints []string, within time.Duration, fault func(r []*Proc) (time.Time, int)) {
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, etcdSharedYAML(endpoints, up.url))
	keys := []string{"/orders/l0", "/orders/l1", "/orders/l2"}
	h := newHistory()
	var next atomic.Int64
	next.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				tok := next.Load()
				if rng.IntN(4) == 0 {
					tok = next.Add(1)
				} else if rng.IntN(5) == 0 && tok > 1 {
					tok -= int64(1 + rng.IntN(2)) // a zombie's
				}
				via := rng.IntN(2)
				call := h.now()
				st, body, err := tryWriteTimeout(r[via].URL("gateway")+key, strconv.FormatInt(tok, 10), fmt.Sprintf("w%d-%d", w, i), 10*time.Second)
				h.add(w, call, fencedInput{kind: opWrite, key: key, token: tok, owner: "t" + strconv.FormatInt(tok, 10)}, writeOutcome(st, body, err))
				if err != nil {
					time.Sleep(20 * time.Millisecond) // the replica is down
				}
			}
		})
	}
	// A steady writer per replica repeats token 1 on a key nobody
	// advances: the recovery measured is that of a repeated token (an
	// advance after a replica's death waits its forward timeout: the
	// guarantee, not a delay to measure).
	var steadyOK [2]atomic.Int64
	for via := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				call := h.now()
				st, body, err := tryWriteTimeout(r[via].URL("gateway")+"/orders/steady", "1", fmt.Sprintf("s%d-%d", via, i), 10*time.Second)
				h.add(100+via, call, fencedInput{kind: opWrite, key: "/orders/steady", token: 1, owner: "t1"}, writeOutcome(st, body, err))
				if err == nil && st == 200 {
					steadyOK[via].Store(time.Now().UnixNano())
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	from, via := fault(r)
	served := func() time.Time {
		if via >= 0 {
			return time.Unix(0, steadyOK[via].Load())
		}
		return time.Unix(0, max(steadyOK[0].Load(), steadyOK[1].Load()))
	}
	for !served().After(from) {
		if time.Since(from) > 20*time.Second {
			t.Fatal("no write served within 20s of the fault")
		}
		time.Sleep(10 * time.Millisecond)
	}
	recovered := served().Sub(from)
	t.Logf("a repeated token was served %s after the fault", recovered.Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	if recovered > within {
		t.Errorf("writes served again %s after the fault; want within %s", recovered, within)
	}
	for _, k := range append(keys, "/orders/steady") {
		sharedCheckHistory(t, up.rec.HistoryOf(k))
	}
	h.checkLinearizable(t)
}

// The whole etcd cluster down: /readyz says so, every write is refused
// with 503 fence_unavailable and nothing reaches the upstream (I4); once
// the cluster is back the replicas decide again without a restart.
func TestEtcdSharedClusterDownFailsClosed(t *testing.T) {
	c := testenv.Etcd(t, 3)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, etcdSharedYAML(c.Endpoints, up.url))
	if st, body := write(t, "PUT", r[0].URL("gateway")+"/orders/d", "1", "v1"); st != 200 {
		t.Fatalf("first write: %d %s", st, body)
	}
	c.StopAll()
	before := len(up.rec.History())
	for i, p := range r {
		for _, tok := range []string{"1", "2"} {
			st, body, err := tryWriteTimeout(p.URL("gateway")+"/orders/d", tok, "down", 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			wantCode(t, fmt.Sprintf("write of token %s through replica %d with etcd down", tok, i), st, body, 503, "fence_unavailable")
		}
		if st, _ := call(t, "GET", p.URL("admin")+"/readyz", ""); st != 503 {
			t.Fatalf("replica %d /readyz with etcd down: %d", i, st)
		}
	}
	if n := len(up.rec.History()); n != before {
		t.Fatalf("the upstream applied %d writes while etcd was down", n-before)
	}
	c.RestartAll()
	waitForStatus(t, r[1].URL("gateway")+"/orders/d", "2", 200)
	if got, want := recorder.Summary(up.rec.HistoryOf("/orders/d")), "PUT v1@1, PUT v@2"; got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
}

// The deployment of configs/multi-replica-etcd.yaml: one etcd cluster is
// both the workers' lock service (token_source.etcd) and the replicas'
// shared fence. Seed test 1 across replicas: A holds the lock and writes
// through replica 1, stalls past its lease; B takes the lock and writes
// through replica 2; A's late write through either replica is refused,
// and a forged number is refused as unknown without raising the fence.
func TestEtcdSharedWithEtcdLocks(t *testing.T) {
	c := testenv.Etcd(t, 3)
	up := newSharedUpstream(t)
	yaml := strings.Replace(etcdSharedYAML(c.Endpoints, up.url), "      hierarchical: false\n",
		fmt.Sprintf("      hierarchical: false\n      token_source:\n        etcd: {endpoints: [%s], prefix: %s, timeout: 1s}\n", quoteList(c.Endpoints), etcdLockPrefix), 1)
	r := sharedReplicas(t, 2, yaml)
	cli := etcdClient(t, c.Endpoints...)
	const key = "/orders/lk"
	a := mustEtcdLock(t, cli, key, 1)
	if st, body := write(t, "PUT", r[0].URL("gateway")+key, tok(a.token), "a1"); st != 200 {
		t.Fatalf("A's first write: %d %s", st, body)
	}
	a.sess.Orphan() // A stalls: its lease runs out
	b := mustEtcdLock(t, cli, key, 10)
	defer b.sess.Close()
	if st, body := write(t, "PUT", r[1].URL("gateway")+key, tok(b.token), "b1"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	for i, p := range r {
		st, body := write(t, "PUT", p.URL("gateway")+key, tok(a.token), "a2")
		wantCode(t, fmt.Sprintf("A's late write through replica %d", i), st, body, 409, "stale_fencing_token")
	}
	st, body := write(t, "PUT", r[0].URL("gateway")+key, tok(b.token+1000), "forged")
	wantCode(t, "a forged token", st, body, 409, "unknown_fencing_token")
	if got, want := recorder.Summary(up.rec.HistoryOf(key)), fmt.Sprintf("PUT a1@%d, PUT b1@%d", a.token, b.token); got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
	if rec := etcdRecord(t, c.Endpoints, key); !strings.Contains(rec, fmt.Sprintf(`"h":%d,`, b.token)) {
		t.Fatalf("etcd fence record %s; want highest %d (the forged number raised nothing)", rec, b.token)
	}
}
