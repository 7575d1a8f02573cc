package e2e

// token_source proves the sender holds the lock, not merely that the
// number belongs to it (issue 43, finding 2): tokens of a waiter, of a key
// or node put by hand beside the recipe, and of a waiter that gave up are
// refused with not_lock_holder, the holder's writes still land, and the
// upstream's history holds the holder's writes only.

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

// etcdWaiter queues for the lock of res behind its holder, as a second
// worker would, and returns its lock key's create revision once the key is
// in etcd, and the function that gives up waiting (the Mutex then deletes
// its key).
func etcdWaiter(t *testing.T, cli *clientv3.Client, res string) (token int64, giveUp func()) {
	t.Helper()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	m := concurrency.NewMutex(sess, resource.LockName(etcdLockPrefix, res))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Lock(ctx) }()
	key := fmt.Sprintf("%s/%x", resource.LockName(etcdLockPrefix, res), sess.Lease())
	waitFor(t, func() bool {
		gr, err := cli.Get(context.Background(), key)
		if err == nil && len(gr.Kvs) == 1 {
			token = gr.Kvs[0].CreateRevision
		}
		return token != 0
	})
	select {
	case err := <-done:
		t.Fatalf("the waiter got the lock of %s while its holder holds it: %v", res, err)
	default:
	}
	return token, func() {
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the waiter got the lock instead of giving up")
		}
		// A cancel that lands while the Mutex's first Txn is in flight
		// returns before its wait and leaves the key behind (etcd's Lock
		// releases it only when the wait fails); a worker that gives up
		// releases it, as here.
		if _, err := cli.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			gr, err := cli.Get(context.Background(), key)
			return err == nil && len(gr.Kvs) == 0
		})
	}
}

// etcdOwner is the create revision of the key that owns the lock of res,
// as etcd's Mutex decides it.
func etcdOwner(t *testing.T, cli *clientv3.Client, res string) int64 {
	t.Helper()
	gr, err := cli.Get(context.Background(), resource.LockName(etcdLockPrefix, res)+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(gr.Kvs) != 1 {
		t.Fatalf("owner of %s: %v %v", res, gr, err)
	}
	return gr.Kvs[0].CreateRevision
}

func TestEtcdTokenSourceHolder(t *testing.T) {
	cluster := testenv.Etcd(t, 1)
	rec, up := newUpstream(t)
	p := startFencegate(t, etcdGateway(up, cluster.Endpoints))
	gw := p.URL("gateway")
	cli := etcdClient(t, cluster.Endpoints...)
	ctx := context.Background()

	// A waiter writes before the holder: on the old check its revision
	// raised the fence above the holder, who was then refused.
	t.Run("Waiter", func(t *testing.T) {
		const res = "/orders/40"
		h := mustEtcdLock(t, cli, res, 30)
		defer h.sess.Close()
		w, giveUp := etcdWaiter(t, cli, res)
		st, body := write(t, "PUT", gw+res, tok(w), "waiter")
		wantCode(t, "the waiter's write", st, body, 409, "not_lock_holder")
		if st, body := write(t, "PUT", gw+res, tok(h.token), "holder1"); st != 200 {
			t.Fatalf("the holder's write after the waiter's: %d %s", st, body)
		}
		// A waiter that gave up: its key is deleted, but it existed.
		giveUp()
		st, body = write(t, "PUT", gw+res, tok(w), "gave-up")
		wantCode(t, "the write of a waiter that gave up", st, body, 409, "not_lock_holder")
		if st, body := write(t, "PUT", gw+res, tok(h.token), "holder2"); st != 200 {
			t.Fatalf("the holder's second write: %d %s", st, body)
		}
		if got, want := applied(rec, res), fmt.Sprintf("PUT holder1@%d, PUT holder2@%d", h.token, h.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
		if o := etcdOwner(t, cli, res); o != h.token {
			t.Fatalf("etcd says the owner of %s is revision %d; the holder's is %d", res, o, h.token)
		}
	})

	// A waiter that gave up before anyone wrote: its key was deleted
	// while it was not the owner, so the fence is still below it.
	t.Run("GaveUpFirst", func(t *testing.T) {
		const res = "/orders/41"
		h := mustEtcdLock(t, cli, res, 30)
		defer h.sess.Close()
		w, giveUp := etcdWaiter(t, cli, res)
		giveUp()
		st, body := write(t, "PUT", gw+res, tok(w), "gave-up")
		wantCode(t, "the write of a waiter that gave up", st, body, 409, "not_lock_holder")
		holderLands(t, rec, gw, res, h.token)
	})

	// A key put by hand under the lock's name, without a lease: etcd's
	// Mutex would take it for the owner (it is the lowest), but no recipe
	// put it and nothing ends it.
	t.Run("HandPutKey", func(t *testing.T) {
		const res = "/orders/42"
		key := resource.LockName(etcdLockPrefix, res) + "/by-hand"
		pr, err := cli.Put(ctx, key, "")
		if err != nil {
			t.Fatal(err)
		}
		if o := etcdOwner(t, cli, res); o != pr.Header.Revision {
			t.Fatalf("the hand-put key (revision %d) is not the owner (%d)", pr.Header.Revision, o)
		}
		st, body := write(t, "PUT", gw+res, tok(pr.Header.Revision), "by-hand")
		wantCode(t, "the hand-put key's revision", st, body, 409, "not_lock_holder")
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		h := mustEtcdLock(t, cli, res, 30)
		defer h.sess.Close()
		holderLands(t, rec, gw, res, h.token)
	})

	// A holder released before its first write reached the gateway cannot
	// be told from a waiter that gave up; one whose token was admitted
	// while it held the lock keeps being decided by the fence: accepted
	// until the next holder writes, stale after.
	t.Run("Released", func(t *testing.T) {
		const res = "/orders/43"
		a := mustEtcdLock(t, cli, res, 30)
		if st, body := write(t, "PUT", gw+res, tok(a.token), "a1"); st != 200 {
			t.Fatalf("A's write: %d %s", st, body)
		}
		a.mu.Unlock(ctx)
		a.sess.Close()
		if st, body := write(t, "PUT", gw+res, tok(a.token), "a2"); st != 200 {
			t.Fatalf("A's late write, before anyone newer wrote: %d %s", st, body)
		}
		b := mustEtcdLock(t, cli, res, 30)
		b.mu.Unlock(ctx)
		b.sess.Close()
		st, body := write(t, "PUT", gw+res, tok(b.token), "b1")
		wantCode(t, "B's first write after its release", st, body, 409, "not_lock_holder")
		c := mustEtcdLock(t, cli, res, 30)
		defer c.sess.Close()
		if st, body := write(t, "PUT", gw+res, tok(c.token), "c1"); st != 200 {
			t.Fatalf("C's write: %d %s", st, body)
		}
		st, body = write(t, "PUT", gw+res, tok(a.token), "a3")
		wantCode(t, "A's write after C's", st, body, 409, "stale_fencing_token")
		if got, want := applied(rec, res), fmt.Sprintf("PUT a1@%d, PUT a2@%d, PUT c1@%d", a.token, a.token, c.token); got != want {
			t.Fatalf("upstream history: %s; want %s", got, want)
		}
	})
}

// holderLands writes as the lock's holder and checks that the write is the
// only one the upstream applied to res: nothing refused before it landed.
func holderLands(t *testing.T, rec *recorder.Recorder, gw, res string, token int64) {
	t.Helper()
	if st, body := write(t, "PUT", gw+res, tok(token), "holder"); st != 200 {
		t.Fatalf("the holder's write: %d %s", st, body)
	}
	if got, want := applied(rec, res), fmt.Sprintf("PUT holder@%d", token); got != want {
		t.Fatalf("upstream history: %s; want %s", got, want)
	}
}

// zkMkdirs creates the persistent nodes of p and its parents.
func zkMkdirs(t *testing.T, c *zk.Conn, p string) {
	t.Helper()
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if _, err := c.Create(p[:i], nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
				t.Fatalf("create %s: %v", p[:i], err)
			}
		}
	}
}

// zkWaiter queues for the lock of res behind its holder (a second worker
// with a session of its own) and returns its lock node's czxid.
func zkWaiter(t *testing.T, server, res string, holder int64) int64 {
	t.Helper()
	c := zkConn(t, server, 30*time.Second)
	lock := resource.LockName(zkLockPath, res)
	l := zk.NewLock(c, lock, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	var token int64
	waitFor(t, func() bool {
		children, _, err := c.Children(lock)
		if err != nil {
			return false
		}
		for _, name := range children {
			if _, st, err := c.Exists(lock + "/" + name); err == nil && st != nil && st.Czxid != holder && st.EphemeralOwner != 0 {
				token = st.Czxid
			}
		}
		return token != 0
	})
	select {
	case err := <-done:
		t.Fatalf("the waiter got the lock of %s while its holder holds it: %v", res, err)
	default:
	}
	return token
}

func TestZooKeeperTokenSourceHolder(t *testing.T) {
	server := testenv.ZooKeeper(t)
	rec, up := newUpstream(t)
	p := startFencegate(t, zkGateway(up, server.Addr))
	gw := p.URL("gateway")
	admin := zkConn(t, server.Addr, 10*time.Second)

	// A waiter writes before the holder: on the old check its czxid
	// raised the fence above the holder, who was then refused.
	t.Run("Waiter", func(t *testing.T) {
		const res = "/orders/40"
		h := zkLock(t, zkConn(t, server.Addr, 30*time.Second), res)
		defer h.lock.Unlock()
		w := zkWaiter(t, server.Addr, res, h.token)
		st, body := write(t, "PUT", gw+res, tok(w), "waiter")
		wantCode(t, "the waiter's write", st, body, 409, "not_lock_holder")
		holderLands(t, rec, gw, res, h.token)
	})

	// Nodes put by hand under the lock path, each the only child: an
	// ephemeral one outside the recipe's naming, and a persistent one in
	// it. Neither is a lock the recipe granted.
	for _, c := range []struct {
		name, node string
		flags      int32
	}{
		{"EphemeralNotRecipe", "intruder", zk.FlagEphemeral},
		{"PersistentRecipeName", "_c_0-lock-0000000000", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := "/orders/" + strings.ToLower(c.name)
			lock := resource.LockName(zkLockPath, res)
			zkMkdirs(t, admin, lock)
			node := path.Join(lock, c.node)
			if _, err := admin.Create(node, nil, c.flags, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatal(err)
			}
			_, st, err := admin.Exists(node)
			if err != nil {
				t.Fatal(err)
			}
			sb, body := write(t, "PUT", gw+res, tok(st.Czxid), "by-hand")
			wantCode(t, "the hand-made node's czxid", sb, body, 409, "not_lock_holder")
			if err := admin.Delete(node, -1); err != nil {
				t.Fatal(err)
			}
			h := zkLock(t, zkConn(t, server.Addr, 30*time.Second), res)
			defer h.lock.Unlock()
			holderLands(t, rec, gw, res, h.token)
		})
	}
}
