package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestEtcdAutoCompaction: the compaction flags reach etcd (a superseded
// version is compacted away on its own) and compaction keeps the current
// value, which is all a fence needs.
func TestEtcdAutoCompaction(t *testing.T) {
	cluster := testenv.EtcdWith(t, 1, testenv.EtcdOptions{
		AutoCompaction: []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1s"},
	})
	cli, err := clientv3.New(cluster.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	first, err := cli.Put(ctx, "/fencegate/f/orders/7", "41")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/fencegate/f/orders/7", "42"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cli.Get(ctx, "/fencegate/f/orders/7", clientv3.WithRev(first.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d still readable after 30s of auto-compaction every second: %v", first.Header.Revision, err)
		}
		// etcd compacts to a revision it noted a period before; a write
		// gives it a newer one to note.
		if _, err := cli.Put(ctx, "/fencegate/other", time.Now().String()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	got, err := cli.Get(ctx, "/fencegate/f/orders/7")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "42" {
		t.Fatalf("the fence after compaction: %v %v; want 42", got, err)
	}
}
