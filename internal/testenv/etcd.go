package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdCluster is a running etcd cluster of several members on loopback
// (etcd 3.7.3 built by scripts/tools.sh etcd, else Debian's etcd-server).
type EtcdCluster struct {
	// Endpoints are the members' client URLs, in member order (https://
	// with EtcdOptions.TLS).
	Endpoints []string
	// MetricsURLs serve each member's /metrics and /health over plain
	// HTTP, also with TLS (no client certificate needed).
	MetricsURLs []string
	// With EtcdOptions.TLS: the CA that signed the members' certificates,
	// and a client certificate it issued (common name "fencegate").
	CAFile, CertFile, KeyFile string
	// With EtcdOptions.Auth: user root's name and password.
	Username, Password string
	members            []*etcdMember
	bin                string
	t                  testing.TB
}

// EtcdOptions configure EtcdWith.
type EtcdOptions struct {
	// TLS serves the client URLs over TLS with certificates of a CA made
	// for the test, and asks clients for a certificate of that CA
	// (--client-cert-auth).
	TLS bool
	// Auth enables etcd's authentication with user root (the cluster's
	// Password), before EtcdWith returns.
	Auth bool
	// AutoCompaction replaces the production flags of Etcd
	// (EtcdAutoCompaction), e.g. {"--auto-compaction-mode", "periodic",
	// "--auto-compaction-retention", "2s"} for a test of compaction.
	AutoCompaction []string
}

// EtcdAutoCompaction are the compaction flags of every test cluster: those
// docs/operations.md recommends, so tests run as production does.
var EtcdAutoCompaction = []string{"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "5m"}

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
	return EtcdWith(t, n, EtcdOptions{})
}

// EtcdWith is Etcd with options: TLS on the client URLs, authentication.
func EtcdWith(t testing.TB, n int, o EtcdOptions) *EtcdCluster {
	t.Helper()
	bin, err := LookBinary("etcd")
	if err != nil {
		missing(t, "etcd", "run scripts/tools.sh etcd (etcd 3.7.3 into .cache/bin), or install Debian's etcd-server (scripts/deps.sh)")
	}
	dir := t.TempDir()
	scheme := "http"
	var tlsArgs []string
	c := &EtcdCluster{t: t, bin: bin}
	if o.TLS {
		scheme = "https"
		pki, err := newTestPKI(dir)
		if err != nil {
			t.Fatalf("testenv: etcd certificates: %v", err)
		}
		c.CAFile, c.CertFile, c.KeyFile = pki.ca, pki.clientCert, pki.clientKey
		tlsArgs = []string{"--cert-file", pki.serverCert, "--key-file", pki.serverKey,
			"--trusted-ca-file", pki.ca, "--client-cert-auth"}
	}
	compaction := EtcdAutoCompaction
	if o.AutoCompaction != nil {
		compaction = o.AutoCompaction
	}
	client := make([]int, n)
	peer := make([]string, n)
	initial := make([]string, n)
	for i := range n {
		client[i] = FreePort(t)
		peer[i] = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
		initial[i] = fmt.Sprintf("m%d=%s", i, peer[i])
	}
	for i := range n {
		curl := fmt.Sprintf("%s://127.0.0.1:%d", scheme, client[i])
		murl := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
		m := &etcdMember{
			name: fmt.Sprintf("etcd-m%d", i),
			log:  logPath(t, fmt.Sprintf("etcd-m%d", i)),
			args: append([]string{
				"--name", fmt.Sprintf("m%d", i),
				"--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
				"--listen-client-urls", curl, "--advertise-client-urls", curl,
				"--listen-metrics-urls", murl,
				"--listen-peer-urls", peer[i], "--initial-advertise-peer-urls", peer[i],
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new", "--initial-cluster-token", "fencegate-test",
				"--heartbeat-interval", "50", "--election-timeout", "500",
				"--quota-backend-bytes", "268435456",
			}, append(slices.Clone(compaction), tlsArgs...)...),
		}
		c.Endpoints = append(c.Endpoints, curl)
		c.MetricsURLs = append(c.MetricsURLs, murl)
		c.members = append(c.members, m)
		c.start(i)
	}
	for i := range n {
		c.waitHealthy(i, func(err error) { c.members[i].p.failStart(t, err) })
	}
	if o.Auth {
		c.Username, c.Password = "root", "root-"+strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := c.enableAuth(); err != nil {
			t.Fatalf("testenv: etcd auth enable: %v", err)
		}
	}
	return c
}

// waitHealthy waits for member i's /health to answer true: it has a leader
// and can serve a quorum read.
func (c *EtcdCluster) waitHealthy(i int, fail func(error)) {
	if err := poll(context.Background(), 60*time.Second, c.members[i].p.done, "etcd "+c.Endpoints[i], func(ctx context.Context) error {
		return healthy(ctx, c.MetricsURLs[i]+"/health")
	}); err != nil {
		fail(err)
	}
}

// ClientConfig is a clientv3 configuration for the cluster as root: its
// TLS client certificate and password, when it has them.
func (c *EtcdCluster) ClientConfig() clientv3.Config {
	c.t.Helper()
	cfg := clientv3.Config{Endpoints: c.Endpoints, Username: c.Username, Password: c.Password,
		DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	if c.CAFile != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			c.t.Fatalf("testenv: %v", err)
		}
		cfg.TLS = tc
	}
	return cfg
}

func (c *EtcdCluster) tlsConfig() (*tls.Config, error) {
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// enableAuth adds user root with the root role and turns authentication on.
func (c *EtcdCluster) enableAuth() error {
	cfg := c.ClientConfig()
	cfg.Username, cfg.Password = "", ""
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.UserAdd(ctx, c.Username, c.Password); err != nil {
		return err
	}
	if _, err := cli.UserGrantRole(ctx, c.Username, "root"); err != nil {
		return err
	}
	_, err = cli.AuthEnable(ctx)
	return err
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
	c.waitHealthy(i, func(err error) { c.t.Fatalf("testenv: etcd member %d did not come back: %v", i, err) })
}

// StopAll stops every member (the whole cluster unreachable).
func (c *EtcdCluster) StopAll() {
	// All at once, as a whole cluster goes down: one by one, the last
	// members of etcd 3.7 spend seconds in a graceful stop without a
	// quorum while the first ones still serve.
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(func() { m.p.stop(syscall.SIGTERM, 10*time.Second) })
	}
	wg.Wait()
}

// RestartAll starts every member again after StopAll and waits for the
// cluster to serve.
func (c *EtcdCluster) RestartAll() {
	c.t.Helper()
	for i := range c.members {
		c.start(i)
	}
	for i := range c.members {
		c.waitHealthy(i, func(err error) { c.t.Fatalf("testenv: etcd member %d did not come back: %v", i, err) })
	}
}
