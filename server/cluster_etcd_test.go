package server_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestConsoleClusterEtcd: the console's cluster view with store.etcd, as
// TestConsoleCluster with PostgreSQL: the console of either replica shows
// both (each one's writes in flight and refusals), a replica whose report
// went silent is shown down, and one that stops cleanly deletes its report
// key from etcd and leaves the view.
func TestConsoleClusterEtcd(t *testing.T) {
	cluster := testenv.Etcd(t, 1)
	yaml := strings.Replace(strings.Replace(clusterYAML, `  postgres: {url: "%s"}`,
		fmt.Sprintf("  etcd: {endpoints: [%q], prefix: /fg, lease_ttl: 2s}", cluster.Endpoints[0]), 1),
		"fence: {mode: shared, verify_tokens: false}", "fence: {mode: shared}", 1)
	yaml = strings.Replace(yaml, `      resource: "{path}"`, "      resource: \"{path}\"\n      hierarchical: false", 1)
	cp := startClusterPair(t, fmt.Sprintf(yaml, auth.HashKey(consoleKey)))

	// A replica that stopped reporting a minute ago (crashed).
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ago := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	if _, err := cli.Put(context.Background(), "/fg/v/crashed0",
		`{"n":"gone-host","s":`+ago+`,"t":`+ago+`,"r":{"inflight_writes":2,"refusals":7,"recent_refusals":[]}}`); err != nil {
		t.Fatal(err)
	}

	// Asked of replica 2: replica 1's refusals, replica 2's write.
	p := cp.wait(t, 3)
	var other console.Replica
	for _, r := range p.Replicas {
		switch {
		case r.ID == "crashed0":
			if r.Up || r.Name != "gone-host" || r.InFlight != 2 {
				t.Errorf("the silent replica is shown %+v; want down, gone-host, 2 in flight", r)
			}
		case !r.Up:
			t.Errorf("replica %s is shown down while it reports", r.ID)
		case !r.Self:
			other = r
		}
	}
	wantOtherReplica(t, p, other)

	// Replica 1 stops cleanly: its key is deleted, it leaves the view.
	cp.stopFirst(t, other.ID)
	if resp, err := cli.Get(context.Background(), "/fg/v/"+other.ID); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("replica 1's report key after a clean stop: %v, %v; want deleted", resp, err)
	}
}
