package etcd

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The store id is drawn once and read by every process (the key in etcd
// holds it); a prefix wiped draws another.
func TestStoreID(t *testing.T) {
	c := &testCluster{EtcdCluster: testenv.Etcd(t, 1), prefix: "/fg"}
	ctx := context.Background()
	a, err := c.store(t).StoreID(ctx)
	if err != nil || len(a) != 32 {
		t.Fatalf("first id %q, %v", a, err)
	}
	if b, err := c.store(t).StoreID(ctx); err != nil || b != a {
		t.Fatalf("another process reads %q, %v; want %q", b, err, a)
	}
	cli := c.client(t)
	if resp, err := cli.Get(ctx, "/fg/id"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != a {
		t.Fatalf("etcd holds %v, %v; want %q", resp, err, a)
	}
	if _, err := cli.Delete(ctx, "/fg/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if b, err := c.store(t).StoreID(ctx); err != nil || b == a {
		t.Fatalf("after the prefix was wiped: %q, %v; want a new id", b, err)
	}
}
