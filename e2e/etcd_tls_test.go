package e2e

import (
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestEtcdTokenSourceTLSAuth: `fencegate serve` with token_source.etcd
// over TLS (a client certificate) and with a user, against a cluster that
// requires both: the holder's token is verified and its write lands, a
// newer holder's write turns it stale, and a number the lock never issued
// is refused. What the upstream holds is the check.
func TestEtcdTokenSourceTLSAuth(t *testing.T) {
	cluster := testenv.EtcdWith(t, 1, testenv.EtcdOptions{TLS: true, Auth: true})
	rec, up := newUpstream(t)
	// etcdGateway's route, with the user and the TLS files.
	cfg := strings.Replace(etcdGateway(up, cluster.Endpoints), "timeout: 1s}", fmt.Sprintf(
		"timeout: 2s, username: root, password: %q, tls: {ca_file: %q, cert_file: %q, key_file: %q}}",
		cluster.Password, cluster.CAFile, cluster.CertFile, cluster.KeyFile), 1)
	p := startFencegate(t, cfg)
	gw := p.URL("gateway")
	if st, body := call(t, "GET", p.URL("admin")+"/readyz", ""); st != 200 {
		t.Fatalf("/readyz: %d %s", st, body)
	}
	cli, err := clientv3.New(cluster.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	a := mustEtcdLock(t, cli, "/orders/7", 30)
	if st, body := write(t, "PUT", gw+"/orders/7", tok(a.token), "a"); st != 200 {
		t.Fatalf("the holder's write over TLS: %d %s", st, body)
	}
	if err := a.mu.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := mustEtcdLock(t, cli, "/orders/7", 30)
	if st, body := write(t, "PUT", gw+"/orders/7", tok(b.token), "b"); st != 200 {
		t.Fatalf("the next holder's write: %d %s", st, body)
	}
	st, body := write(t, "PUT", gw+"/orders/7", tok(a.token), "a-late")
	wantCode(t, "the first holder after the second wrote", st, body, 409, "stale_fencing_token")
	st, body = write(t, "PUT", gw+"/orders/7", tok(b.token+1000), "forged")
	wantCode(t, "a number the lock never issued", st, body, 409, "unknown_fencing_token")
	if got, want := applied(rec, "/orders/7"), fmt.Sprintf("PUT a@%d, PUT b@%d", a.token, b.token); got != want {
		t.Fatalf("upstream history: %s; want %s", got, want)
	}
	if log := p.Log(); strings.Contains(log, cluster.Password) {
		t.Fatal("the gateway's log holds the etcd password")
	}
}
