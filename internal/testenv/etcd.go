package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EtcdCluster is a running etcd cluster of several members on loopback
// (Debian's etcd-server, scripts/deps.sh).
type EtcdCluster struct {
	// Endpoints are the members' client URLs, in member order.
	Endpoints []string
	members   []*etcdMember
	bin       string
	t         testing.TB
}

type etcdMember struct {
	name string
	args []string
	log  string
	p    *process
}

// Etcd starts an etcd cluster of n members and stops it at the end of the
// test. Elections are fast (heartbeat 50ms, election timeout 500ms) so a
// killed leader is replaced within a second.
func Etcd(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	bin, err := LookBinary("etcd")
	if err != nil {
		missing(t, "etcd", "install Debian's etcd-server (scripts/deps.sh)")
	}
	dir := t.TempDir()
	client := make([]int, n)
	peer := make([]string, n)
	initial := make([]string, n)
	for i := range n {
		client[i] = FreePort(t)
		peer[i] = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
		initial[i] = fmt.Sprintf("m%d=%s", i, peer[i])
	}
	c := &EtcdCluster{t: t, bin: bin}
	for i := range n {
		curl := fmt.Sprintf("http://127.0.0.1:%d", client[i])
		m := &etcdMember{
			name: fmt.Sprintf("etcd-m%d", i),
			log:  logPath(t, fmt.Sprintf("etcd-m%d", i)),
			args: []string{
				"--name", fmt.Sprintf("m%d", i),
				"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
				"--listen-client-urls", curl, "--advertise-client-urls", curl,
				"--listen-peer-urls", peer[i], "--initial-advertise-peer-urls", peer[i],
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new", "--initial-cluster-token", "fencegate-test",
				"--heartbeat-interval", "50", "--election-timeout", "500",
				"--quota-backend-bytes", "268435456",
			},
		}
		c.Endpoints = append(c.Endpoints, curl)
		c.members = append(c.members, m)
		c.start(i)
	}
	for i := range n {
		// /health answers true once the member has a leader and can
		// serve a quorum read.
		if err := poll(context.Background(), 60*time.Second, c.members[i].p.done, "etcd "+c.Endpoints[i], func(ctx context.Context) error {
			return healthy(ctx, c.Endpoints[i]+"/health")
		}); err != nil {
			c.members[i].p.failStart(t, err)
		}
	}
	return c
}

func healthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	body := string(b)
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("GET %s: %s", url, body)
	}
	return nil
}

func (c *EtcdCluster) start(i int) {
	m := c.members[i]
	p, err := startProcess(m.name, m.log, nil, nil, c.bin, m.args...)
	if err != nil {
		c.t.Fatalf("testenv: %v", err)
	}
	m.p = p
	p.cleanup(c.t, syscall.SIGTERM)
}

// Kill stops member i with SIGKILL (a crash).
func (c *EtcdCluster) Kill(i int) { c.members[i].p.stop(syscall.SIGKILL, 5*time.Second) }

// Restart starts member i again on its data directory, after Kill.
func (c *EtcdCluster) Restart(i int) {
	c.t.Helper()
	c.start(i)
	if err := poll(context.Background(), 60*time.Second, c.members[i].p.done, "etcd "+c.Endpoints[i], func(ctx context.Context) error {
		return healthy(ctx, c.Endpoints[i]+"/health")
	}); err != nil {
		c.t.Fatalf("testenv: etcd member %d did not come back: %v", i, err)
	}
}

// StopAll stops every member (the whole cluster unreachable).
func (c *EtcdCluster) StopAll() {
	for _, m := range c.members {
		m.p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// RestartAll starts every member again after StopAll and waits for the
// cluster to serve.
func (c *EtcdCluster) RestartAll() {
	c.t.Helper()
	for i := range c.members {
		c.start(i)
	}
	for i := range c.members {
		if err := poll(context.Background(), 60*time.Second, c.members[i].p.done, "etcd "+c.Endpoints[i], func(ctx context.Context) error {
			return healthy(ctx, c.Endpoints[i]+"/health")
		}); err != nil {
			c.t.Fatalf("testenv: etcd member %d did not come back: %v", i, err)
		}
	}
}
