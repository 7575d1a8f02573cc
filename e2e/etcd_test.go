package e2e

// token_source etcd: workers hold go.etcd.io/etcd/client/v3/concurrency
// mutexes on a real three-member cluster and send their lock key's create
// revision as the token. The stale-owner tests of docs/design.md §8 (1, 2,
// 7, 8) with etcd as the lock service, forged and foreign revisions,
// a leader killed while writes flow, and etcd unreachable.

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

const etcdLockPrefix = "/fencegate/locks"

// etcdGateway: /orders/ fenced by etcd locks, /reports/ by fencegate's own
// coordinator (a mixed estate), on the embedded store.
func etcdGateway(upstream string, endpoints []string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 10s}
      resource: "{path}"
      token_source:
        etcd: {endpoints: [%s], prefix: %s, timeout: 1s}
    - name: reports
      match: {path_prefix: /reports/}
      upstream: {url: %q, timeout: 10s}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
coordinator: {enabled: true, listen: $COORDINATOR}
admin: {listen: $ADMIN}
`, upstream, quoteList(endpoints), etcdLockPrefix, upstream)
}

// quoteList is a YAML flow sequence's items, each quoted (a URL's colon
// would otherwise start a mapping).
func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func etcdClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// etcdHolder is a worker holding the etcd lock of one resource.
type etcdHolder struct {
	sess  *concurrency.Session
	mu    *concurrency.Mutex
	token int64 // the lock key's create revision
}

// etcdLock takes the lock of res with a session of ttl seconds, as a worker
// would, and reads its key's create revision: the token. The session keeps
// its lease alive until sessCtx ends or it is closed or orphaned; ctx
// bounds the wait for the lock.
func etcdLock(sessCtx, ctx context.Context, cli *clientv3.Client, res string, ttl int) (*etcdHolder, error) {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl), concurrency.WithContext(sessCtx))
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(sess, resource.LockName(etcdLockPrefix, res))
	if err := m.Lock(ctx); err != nil {
		sess.Orphan()
		return nil, err
	}
	gr, err := cli.Get(ctx, m.Key())
	if err != nil || len(gr.Kvs) == 0 {
		sess.Orphan()
		return nil, fmt.Errorf("read own lock key %s: %v", m.Key(), err)
	}
	return &etcdHolder{sess: sess, mu: m, token: gr.Kvs[0].CreateRevision}, nil
}

func mustEtcdLock(t *testing.T, cli *clientv3.Client, res string, ttl int) *etcdHolder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := etcdLock(t.Context(), ctx, cli, res, ttl)
	if err != nil {
		t.Fatalf("etcd lock %s: %v", res, err)
	}
	return h
}

func tok(n int64) string { return strconv.FormatInt(n, 10) }

func TestEtcdTokenSource(t *testing.T) {
	cluster := testenv.Etcd(t, 3)
	rec, up := newUpstream(t)
	p := startFencegate(t, etcdGateway(up, cluster.Endpoints))
	gw := p.URL("gateway")
	cli := etcdClient(t, cluster.Endpoints...)

	// Seed test 1: A pauses past its lease (its keepalives stop), B takes
	// the lock and writes, A resumes with its old revision.
	t.Run("PausedPastLease", func(t *testing.T) {
		a := mustEtcdLock(t, cli, "/orders/1", 1)
		if st, b := write(t, "PUT", gw+"/orders/1", tok(a.token), "a1"); st != 200 {
			t.Fatalf("A's first write: %d %s", st, b)
		}
		a.sess.Orphan() // A stalls: no more keepalives, its lease runs out
		b := mustEtcdLock(t, cli, "/orders/1", 10)
		defer b.sess.Close()
		if b.token <= a.token {
			t.Fatalf("B's revision %d is not above A's %d", b.token, a.token)
		}
		if st, body := write(t, "PUT", gw+"/orders/1", tok(b.token), "b1"); st != 200 {
			t.Fatalf("B's write: %d %s", st, body)
		}
		st, body := write(t, "PUT", gw+"/orders/1", tok(a.token), "a2")
		wantCode(t, "A resumed", st, body, 409, "stale_fencing_token")
		if got, want := applied(rec, "/orders/1"), fmt.Sprintf("PUT a1@%d, PUT b1@%d", a.token, b.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})

	// Seed test 2: A's write is held in the network until B's newer write
	// has reached the resource.
	t.Run("DelayedWrite", func(t *testing.T) {
		a := mustEtcdLock(t, cli, "/orders/2", 1)
		req, _ := http.NewRequest("PUT", gw+"/orders/2", strings.NewReader("a1"))
		req.Header.Set("Fencing-Token", tok(a.token))
		a.sess.Orphan()
		b := mustEtcdLock(t, cli, "/orders/2", 10)
		defer b.sess.Close()
		if st, body := write(t, "PUT", gw+"/orders/2", tok(b.token), "b1"); st != 200 {
			t.Fatalf("B's write: %d %s", st, body)
		}
		st, body := do(t, req)
		wantCode(t, "A's delayed write", st, body, 409, "stale_fencing_token")
		if got, want := applied(rec, "/orders/2"), fmt.Sprintf("PUT b1@%d", b.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})

	// Seed test 8: A is cut off from etcd while its connection to the
	// gateway stays up; its lease expires, B takes over.
	t.Run("CutOffFromEtcd", func(t *testing.T) {
		proxy := newCutProxy(t, strings.TrimPrefix(cluster.Endpoints[0], "http://"))
		acli := etcdClient(t, "http://"+proxy.Addr())
		a := mustEtcdLock(t, acli, "/orders/8", 1)
		if st, b := write(t, "PUT", gw+"/orders/8", tok(a.token), "a1"); st != 200 {
			t.Fatalf("A's first write: %d %s", st, b)
		}
		proxy.Cut()
		b := mustEtcdLock(t, cli, "/orders/8", 10)
		defer b.sess.Close()
		if st, body := write(t, "PUT", gw+"/orders/8", tok(b.token), "b1"); st != 200 {
			t.Fatalf("B's write: %d %s", st, body)
		}
		st, body := write(t, "PUT", gw+"/orders/8", tok(a.token), "a2")
		wantCode(t, "A cut off", st, body, 409, "stale_fencing_token")

		// Seed test 7: no other write path takes A's token either.
		for _, m := range []string{"POST", "PATCH", "DELETE", "post"} {
			st, body := write(t, m, gw+"/orders/8", tok(a.token), "a3")
			if st != 409 && st != 400 && st != 405 {
				t.Fatalf("%s with A's token: %d %s", m, st, body)
			}
		}
		for _, path := range []string{"/orders//8", "/orders/./8", "/orders/%38"} {
			st, body := write(t, "PUT", gw+path, tok(a.token), "a4")
			if st != 409 && st != 400 {
				t.Fatalf("PUT %s with A's token: %d %s", path, st, body)
			}
		}
		if got, want := applied(rec, "/orders/8"), fmt.Sprintf("PUT a1@%d, PUT b1@%d", a.token, b.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})

	// Verification: a revision that is no lock key of this resource is
	// refused, whatever it is: from the future, another key's, another
	// lock's, a nested lock's, fencegate's coordinator's.
	t.Run("ForgedRevision", func(t *testing.T) {
		ctx := context.Background()
		pr, err := cli.Put(ctx, "/unrelated", "x")
		if err != nil {
			t.Fatal(err)
		}
		// The holder first: etcd's Mutex on /orders/3 would wait for a
		// lock under /orders/3/ (it takes the name as a key prefix).
		h := mustEtcdLock(t, cli, "/orders/3", 10)
		defer h.sess.Close()
		other := mustEtcdLock(t, cli, "/orders/30", 10)
		defer other.sess.Close()
		nested := mustEtcdLock(t, cli, "/orders/3/items", 10)
		defer nested.sess.Close()
		// fencegate's coordinator issues no lease on an etcd-fenced
		// resource: its token would be a second sequence on one fence.
		st, body := call(t, "POST", p.URL("coordinator")+"/v1/leases/acquire", `{"resource":"/orders/3","owner":"someone","ttl":"1m"}`, jsonCT)
		wantCode(t, "coordinator lease on /orders/3", st, body, 400, "invalid_request")
		for _, c := range []struct {
			what  string
			token int64
		}{
			{"a future revision", pr.Header.Revision + 1000},
			{"a huge number", 1<<62 + 5},
			{"the revision of a plain key", pr.Header.Revision},
			{"another lock's revision", other.token},
			{"a nested lock's revision", nested.token},
			{"a small number", 1},
		} {
			st, body := write(t, "PUT", gw+"/orders/3", tok(c.token), "forged")
			wantCode(t, c.what, st, body, 409, "unknown_fencing_token")
		}
		if st, body := write(t, "PUT", gw+"/orders/3", tok(h.token), "real"); st != 200 {
			t.Fatalf("the holder's write: %d %s", st, body)
		}
		if got, want := applied(rec, "/orders/3"), fmt.Sprintf("PUT real@%d", h.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
		// A lock released before its first write arrived: its key is
		// gone, so it cannot be told from a waiter that gave up
		// (TestEtcdTokenSourceHolder).
		r := mustEtcdLock(t, cli, "/orders/31", 10)
		r.sess.Close()
		st, body = write(t, "PUT", gw+"/orders/31", tok(r.token), "late")
		wantCode(t, "the released holder's first write", st, body, 409, "not_lock_holder")
	})

	// Mixed estate: /reports/ takes the coordinator's tokens and refuses
	// etcd revisions; /orders/ the other way round (ForgedRevision).
	t.Run("MixedEstate", func(t *testing.T) {
		ct := acquire(t, p.URL("coordinator"), "/reports/1", "w1")
		if st, body := write(t, "PUT", gw+"/reports/1", tok(ct), "r1"); st != 200 {
			t.Fatalf("coordinator token on /reports/: %d %s", st, body)
		}
		h := mustEtcdLock(t, cli, "/reports/1", 10)
		defer h.sess.Close()
		st, body := write(t, "PUT", gw+"/reports/1", tok(h.token), "r2")
		wantCode(t, "etcd revision on a coordinator route", st, body, 409, "unknown_fencing_token")
	})

	// The etcd leader is killed while two workers take turns on one
	// resource, each also writing late, after its release: nothing older
	// lands after anything newer.
	t.Run("LeaderKilled", func(t *testing.T) {
		const res = "/orders/9"
		var accepted, afterKill atomic.Int64
		var killed atomic.Bool
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				wcli := etcdClient(t, cluster.Endpoints...)
				for i := 0; i < 12 && ctx.Err() == nil; i++ {
					lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
					h, err := etcdLock(ctx, lctx, wcli, res, 2)
					lcancel()
					if err != nil {
						time.Sleep(100 * time.Millisecond) // an election in progress
						continue
					}
					for j := range 3 {
						st, _, err := tryWriteTimeout(gw+res, tok(h.token), fmt.Sprintf("w%d-%d-%d", w, i, j), 5*time.Second)
						if err == nil && st == 200 {
							accepted.Add(1)
							if killed.Load() {
								afterKill.Add(1)
							}
						}
					}
					uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
					h.mu.Unlock(uctx)
					ucancel()
					h.sess.Close()
					// A late write after the release (a zombie): refused
					// once the other worker's newer token has landed.
					st, _, err := tryWriteTimeout(gw+res, tok(h.token), fmt.Sprintf("late%d-%d", w, i), 5*time.Second)
					if err == nil && st == 200 {
						accepted.Add(1)
					}
				}
			})
		}
		waitFor(t, func() bool { return accepted.Load() >= 6 })
		leader := etcdLeader(t, cli, cluster.Endpoints)
		cluster.Kill(leader)
		killed.Store(true)
		wg.Wait()
		cluster.Restart(leader)
		toks := tokenOrder(t, rec, res)
		if len(toks) != int(accepted.Load()) {
			t.Fatalf("upstream applied %d writes; the gateway accepted %d", len(toks), accepted.Load())
		}
		if afterKill.Load() == 0 {
			t.Fatalf("no write accepted after the leader was killed (%d before)", accepted.Load())
		}
		t.Logf("%d writes accepted, %d after the leader (member %d) was killed", accepted.Load(), afterKill.Load(), leader)
	})

	// etcd unreachable: new tokens are refused (fail closed) with
	// token_source_unavailable, /readyz says so; a token already verified
	// still writes (no read needed); all heals when etcd is back.
	t.Run("Unreachable", func(t *testing.T) {
		h := mustEtcdLock(t, cli, "/orders/5", 60)
		if st, body := write(t, "PUT", gw+"/orders/5", tok(h.token), "v1"); st != 200 {
			t.Fatalf("first write: %d %s", st, body)
		}
		pr, err := cli.Put(context.Background(), "/pad", "x")
		if err != nil {
			t.Fatal(err)
		}
		cluster.StopAll()
		st, body := write(t, "PUT", gw+"/orders/6", tok(pr.Header.Revision), "x")
		wantCode(t, "new token, etcd down", st, body, 503, "token_source_unavailable")
		if st, body := write(t, "PUT", gw+"/orders/5", tok(h.token), "v2"); st != 200 {
			t.Fatalf("verified token, etcd down: %d %s", st, body)
		}
		if st, body := call(t, "GET", p.URL("admin")+"/readyz", ""); st != 503 || !strings.Contains(body, "etcd") {
			t.Fatalf("/readyz with etcd down: %d %s", st, body)
		}
		cluster.RestartAll()
		waitFor(t, func() bool { st, _ := call(t, "GET", p.URL("admin")+"/readyz", ""); return st == 200 })
		h2 := mustEtcdLock(t, cli, "/orders/6", 10)
		defer h2.sess.Close()
		if st, body := write(t, "PUT", gw+"/orders/6", tok(h2.token), "y"); st != 200 {
			t.Fatalf("after etcd is back: %d %s", st, body)
		}
		if got, want := applied(rec, "/orders/6"), fmt.Sprintf("PUT y@%d", h2.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})
}

// TestEtcdTokensSkipMaxAdvance: an etcd revision (raised by every write in
// the cluster) is verified, so fence.max_advance does not cap it; a route
// without a token source still is capped.
func TestEtcdTokensSkipMaxAdvance(t *testing.T) {
	cluster := testenv.Etcd(t, 1)
	rec, up := newUpstream(t)
	p := startFencegate(t, etcdGateway(up, cluster.Endpoints)[:strings.Index(etcdGateway(up, cluster.Endpoints), "coordinator:")]+
		"fence: {max_advance: 2}\nadmin: {listen: $ADMIN}\n")
	gw := p.URL("gateway")
	cli := etcdClient(t, cluster.Endpoints...)
	for i := range 20 {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("/pad/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	h := mustEtcdLock(t, cli, "/orders/1", 10)
	defer h.sess.Close()
	if h.token <= 2 {
		t.Fatalf("token %d: the test needs one above max_advance", h.token)
	}
	if st, body := write(t, "PUT", gw+"/orders/1", tok(h.token), "v"); st != 200 {
		t.Fatalf("verified etcd token %d with max_advance 2: %d %s", h.token, st, body)
	}
	st, body := write(t, "PUT", gw+"/reports/1", tok(h.token), "v")
	wantCode(t, "unverified route", st, body, 409, "token_out_of_range")
	if got, want := applied(rec, "/orders/1"), fmt.Sprintf("PUT v@%d", h.token); got != want {
		t.Fatalf("upstream history: %s; want %s", got, want)
	}
}

// etcdLeader returns the index of the member that leads the cluster.
func etcdLeader(t *testing.T, cli *clientv3.Client, endpoints []string) int {
	t.Helper()
	for i, ep := range endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no etcd member says it leads")
	return -1
}

// TestExampleEtcdctlWorker runs examples/etcdctl-worker.sh under `etcdctl
// lock`, twice: each run writes with its lock key's create revision, the
// second one's newer.
func TestExampleEtcdctlWorker(t *testing.T) {
	etcdctl, err := exec.LookPath("etcdctl")
	if err != nil {
		if testenv.CI() {
			t.Fatal("etcdctl is not installed (scripts/deps.sh installs etcd-client)")
		}
		t.Skip("etcdctl is not installed")
	}
	cluster := testenv.Etcd(t, 1)
	rec, up := newUpstream(t)
	p := startFencegate(t, etcdGateway(up, cluster.Endpoints))
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v2"} {
		cmd := exec.Command(etcdctl, "lock", resource.LockName(etcdLockPrefix, "/orders/7"), "--",
			"bash", filepath.Join(root, "examples", "etcdctl-worker.sh"), "/orders/7", v)
		cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3", "ETCDCTL_ENDPOINTS="+cluster.Endpoints[0], "FENCEGATE_URL="+p.URL("gateway"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("etcdctl lock -- etcdctl-worker.sh: %v\n%s", err, out)
		}
	}
	toks := tokenOrder(t, rec, "/orders/7")
	if len(toks) != 2 || toks[1] <= toks[0] {
		t.Fatalf("upstream history: %s; want v1 then v2 with a newer token", applied(rec, "/orders/7"))
	}
}
