package e2e

// token_source zookeeper: workers hold locks of ZooKeeper's lock recipe
// (github.com/go-zookeeper/zk's Lock, the recipe Curator's
// InterProcessMutex implements) on a real server and send their lock
// node's czxid as the token. Stale-owner tests 1, 2, 7 and 8, forged
// czxids, ZooKeeper down.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

const zkLockPath = "/fencegate/locks"

func zkGateway(upstream, server string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 10s}
      resource: "{path}"
      token_source:
        zookeeper: {servers: [%q], path: %s, timeout: 2s}
    - name: reports
      match: {path_prefix: /reports/}
      upstream: {url: %q, timeout: 10s}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
fence: {max_advance: 2}
admin: {listen: $ADMIN}
`, upstream, server, zkLockPath, upstream)
}

// zkConn connects a worker to server with a session of sessionTimeout.
func zkConn(t *testing.T, server string, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{server}, sessionTimeout, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkHolder is a worker holding the ZooKeeper lock of one resource.
type zkHolder struct {
	lock  *zk.Lock
	token int64 // the lock node's czxid
}

// zkLock takes the lock of res as a worker would and reads its lock
// node's czxid: the holder's node is the child with the lowest sequence
// number (Curator: InterProcessMutex.getParticipantNodes()'s first).
func zkLock(t *testing.T, c *zk.Conn, res string) *zkHolder {
	t.Helper()
	path := resource.LockName(zkLockPath, res)
	l := zk.NewLock(c, path, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("zk lock %s: %v", path, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("zk lock %s: not granted within 30s", path)
	}
	children, _, err := c.Children(path)
	if err != nil || len(children) == 0 {
		t.Fatalf("children of %s: %v %v", path, children, err)
	}
	children = slices.DeleteFunc(children, func(name string) bool { return !strings.Contains(name, "-lock-") })
	seq := func(name string) string { return name[len(name)-10:] }
	slices.SortFunc(children, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
	_, st, err := c.Exists(path + "/" + children[0])
	if err != nil {
		t.Fatal(err)
	}
	return &zkHolder{lock: l, token: st.Czxid}
}

func TestZooKeeperTokenSource(t *testing.T) {
	server := testenv.ZooKeeper(t)
	rec, up := newUpstream(t)
	p := startFencegate(t, zkGateway(up, server.Addr))
	gw := p.URL("gateway")
	admin := zkConn(t, server.Addr, 10*time.Second)
	// Make czxids large enough that fence.max_advance (2) would refuse
	// them were they not verified.
	for i := range 5 {
		if _, err := admin.Create("/pad"+strconv.Itoa(i), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}

	// Seed tests 1 and 8: A's session is cut off (a pause, a partition)
	// while its connection to the gateway stays up; the session expires,
	// its lock node goes, B takes the lock and writes; A's write with its
	// czxid is refused, on every write path (seed test 7).
	t.Run("SessionExpired", func(t *testing.T) {
		proxy := newCutProxy(t, server.Addr)
		ac := zkConn(t, proxy.Addr(), 2*time.Second)
		a := zkLock(t, ac, "/orders/1")
		if st, b := write(t, "PUT", gw+"/orders/1", tok(a.token), "a1"); st != 200 {
			t.Fatalf("A's first write: %d %s", st, b)
		}
		proxy.Cut()
		b := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/1")
		defer b.lock.Unlock()
		if b.token <= a.token {
			t.Fatalf("B's czxid %d is not above A's %d", b.token, a.token)
		}
		if st, body := write(t, "PUT", gw+"/orders/1", tok(b.token), "b1"); st != 200 {
			t.Fatalf("B's write: %d %s", st, body)
		}
		for _, m := range []string{"PUT", "POST", "PATCH", "DELETE"} {
			st, body := write(t, m, gw+"/orders/1", tok(a.token), "a2")
			wantCode(t, "A resumed, "+m, st, body, 409, "stale_fencing_token")
		}
		if got, want := applied(rec, "/orders/1"), fmt.Sprintf("PUT a1@%d, PUT b1@%d", a.token, b.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})

	// Seed test 2: A's write is held in the network until B's newer write
	// has reached the resource.
	t.Run("DelayedWrite", func(t *testing.T) {
		a := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/2")
		aTok := a.token
		a.lock.Unlock()
		b := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/2")
		defer b.lock.Unlock()
		if st, body := write(t, "PUT", gw+"/orders/2", tok(b.token), "b1"); st != 200 {
			t.Fatalf("B's write: %d %s", st, body)
		}
		st, body := write(t, "PUT", gw+"/orders/2", tok(aTok), "a1")
		wantCode(t, "A's delayed write", st, body, 409, "stale_fencing_token")
		if got, want := applied(rec, "/orders/2"), fmt.Sprintf("PUT b1@%d", b.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})

	// Verification: a number that is no lock node's czxid of this
	// resource is refused.
	t.Run("ForgedCzxid", func(t *testing.T) {
		// The holder first: go-zookeeper's recipe cannot take a lock whose
		// path has a nested lock's path as a child.
		h := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/3")
		defer h.lock.Unlock()
		other := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/30")
		defer other.lock.Unlock()
		nested := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/3/items")
		defer nested.lock.Unlock()
		_, pad, err := admin.Exists("/pad0")
		if err != nil {
			t.Fatal(err)
		}
		_, items, err := admin.Exists(resource.LockName(zkLockPath, "/orders/3/items"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what  string
			token int64
		}{
			{"a huge number", 1<<62 + 5},
			{"the next epoch", 1<<32 + 1},
			{"a plain node's czxid", pad.Czxid},
			{"another lock's czxid", other.token},
			{"a nested lock's czxid", nested.token},
			{"a nested lock path's czxid", items.Czxid},
		} {
			st, body := write(t, "PUT", gw+"/orders/3", tok(c.token), "forged")
			wantCode(t, c.what, st, body, 409, "unknown_fencing_token")
		}
		if st, body := write(t, "PUT", gw+"/orders/3", tok(h.token), "real"); st != 200 {
			t.Fatalf("the holder's write: %d %s", st, body)
		}
		// The route without a token source still caps unverified tokens.
		st, body := write(t, "PUT", gw+"/reports/3", tok(h.token), "x")
		wantCode(t, "unverified route", st, body, 409, "token_out_of_range")
		if got, want := applied(rec, "/orders/3"), fmt.Sprintf("PUT real@%d", h.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})

	// ZooKeeper down: new tokens are refused with token_source_unavailable,
	// /readyz says so, a verified token still writes; all heals when the
	// server is back.
	t.Run("Unreachable", func(t *testing.T) {
		h := zkLock(t, zkConn(t, server.Addr, 30*time.Second), "/orders/5")
		if st, body := write(t, "PUT", gw+"/orders/5", tok(h.token), "v1"); st != 200 {
			t.Fatalf("first write: %d %s", st, body)
		}
		server.Stop()
		st, body := write(t, "PUT", gw+"/orders/6", tok(h.token+1000), "x")
		wantCode(t, "new token, ZooKeeper down", st, body, 503, "token_source_unavailable")
		if st, body := write(t, "PUT", gw+"/orders/5", tok(h.token), "v2"); st != 200 {
			t.Fatalf("verified token, ZooKeeper down: %d %s", st, body)
		}
		if st, body := call(t, "GET", p.URL("admin")+"/readyz", ""); st != 503 || !strings.Contains(body, "zookeeper") {
			t.Fatalf("/readyz with ZooKeeper down: %d %s", st, body)
		}
		server.Start()
		waitFor(t, func() bool { st, _ := call(t, "GET", p.URL("admin")+"/readyz", ""); return st == 200 })
		h2 := zkLock(t, zkConn(t, server.Addr, 10*time.Second), "/orders/6")
		defer h2.lock.Unlock()
		if st, body := write(t, "PUT", gw+"/orders/6", tok(h2.token), "y"); st != 200 {
			t.Fatalf("after ZooKeeper is back: %d %s", st, body)
		}
		if got, want := applied(rec, "/orders/6"), fmt.Sprintf("PUT y@%d", h2.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})
}
