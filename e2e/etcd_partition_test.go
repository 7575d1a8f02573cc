package e2e

// An etcd member partitioned from its peers while writes flow through two
// shared replicas: each member's peer traffic goes through a toxiproxy
// proxy, and cutting one proxy both ways cuts every message to that member.

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// peerProxiedEtcd is a three-member etcd cluster whose members reach each
// other only through toxiproxy proxies (peers[i] fronts member i's peer
// port); the clients talk to the members directly.
type peerProxiedEtcd struct {
	endpoints []string
	peers     []*testenv.Proxy
}

func startPeerProxiedEtcd(t *testing.T, tp *testenv.ToxiproxyServer) *peerProxiedEtcd {
	t.Helper()
	bin, err := testenv.LookBinary("etcd")
	if err != nil {
		if testenv.CI() {
			t.Fatal("etcd is missing (scripts/deps.sh)")
		}
		t.Skip("etcd is missing")
	}
	const n = 3
	c := &peerProxiedEtcd{}
	var peerPort []int
	var initial []string
	for i := range n {
		peerPort = append(peerPort, testenv.FreePort(t))
		px := tp.Proxy(t, fmt.Sprintf("etcd-peer%d", i), fmt.Sprintf("127.0.0.1:%d", peerPort[i]))
		c.peers = append(c.peers, px)
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, px.Listen))
		c.endpoints = append(c.endpoints, fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)))
	}
	dir := t.TempDir()
	for i := range n {
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", c.endpoints[i], "--advertise-client-urls", c.endpoints[i],
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort[i]),
			"--initial-advertise-peer-urls", "http://"+c.peers[i].Listen,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "fencegate-partition",
			"--heartbeat-interval", "50", "--election-timeout", "500")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, ep := range c.endpoints {
		for {
			resp, err := http.Get(ep + "/health")
			if err == nil {
				var b [256]byte
				k, _ := resp.Body.Read(b[:])
				resp.Body.Close()
				if strings.Contains(string(b[:k]), `"health":"true"`) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd %s not healthy", ep)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c
}

// The etcd leader partitioned from its peers (every message to it
// dropped) while writes flow: it loses its leadership (check quorum), the
// others elect a new leader, the replicas keep deciding through the
// members that have one, Porcupine finds the answers linearizable and the
// upstream's order never goes back; a repeated token is served again
// within 2s of the new leader's election.
func TestEtcdSharedMemberPartitioned(t *testing.T) {
	tp := testenv.Toxiproxy(t)
	c := startPeerProxiedEtcd(t, tp)
	etcdLinearizableOn(t, c.endpoints, 2*time.Second, func(r []*Proc) (time.Time, int) {
		cli := etcdClient(t, c.endpoints...)
		leader := etcdLeader(t, cli, c.endpoints)
		was := leaderID(t, cli, c.endpoints[leader])
		at := time.Now()
		px := c.peers[leader]
		px.AddToxic(t, testenv.Toxic{Name: "cut_down", Type: "timeout", Attributes: map[string]any{"timeout": 0}})
		px.AddToxic(t, testenv.Toxic{Name: "cut_up", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}})
		// The partition took: the others elect a leader of their own.
		// Recovery is measured from that election, which is etcd's time
		// (seconds on a loaded machine), not the replicas'.
		elected := electedAfter(t, cli, c.endpoints, leader, was)
		t.Logf("member %d partitioned; a new leader was elected %s later", leader, elected.Sub(at).Round(time.Millisecond))
		go func() {
			time.Sleep(4 * time.Second)
			px.RemoveToxic(t, "cut_down")
			px.RemoveToxic(t, "cut_up")
		}()
		return elected, -1
	})
}

// leaderID is the leader member ep names (0 if it cannot say).
func leaderID(t *testing.T, cli *clientv3.Client, ep string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return 0
	}
	return st.Leader
}

// electedAfter waits (bounded: 10s) until a member other than
// endpoints[old] names a leader other than was (the one before the fault),
// and returns when the poll that saw it was sent (the election ended at
// most one poll before: the recovery measured from it is not shortened
// by the poll's own time).
func electedAfter(t *testing.T, cli *clientv3.Client, endpoints []string, old int, was uint64) time.Time {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, ep := range endpoints {
			if i == old {
				continue // dead, or cut off: it may still name itself
			}
			sent := time.Now()
			if id := leaderID(t, cli, ep); id != 0 && id != was {
				return sent
			}
		}
	}
	t.Fatalf("no new leader elected within 10s (member %d led)", old)
	return time.Time{}
}
