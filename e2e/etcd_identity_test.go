package e2e

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// store.identity_file on store.etcd: a gateway that served from the
// cluster refuses to start once the fences' prefix was wiped (a cluster
// replaced or emptied: every zombie's token would look new) until the
// loss is accepted, which adopts the new store.
func TestEtcdServeRefusesWipedStore(t *testing.T) {
	c := testenv.Etcd(t, 1)
	up := newSharedUpstream(t)
	yaml := strings.Replace(etcdSharedYAML(c.Endpoints, up.url), "store:\n", "store:\n  identity_file: $DIR/identity.json\n", 1)
	p := startFencegate(t, yaml)
	if st, body := write(t, "PUT", p.URL("gateway")+"/orders/7", "5", "v"); st != 200 {
		t.Fatalf("write: %d %s", st, body)
	}
	p.Stop()
	p.Restart() // the same cluster: served again
	p.Stop()
	if _, err := etcdClient(t, c.Endpoints...).Delete(context.Background(), "/fg/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the refusal does not adopt the wiped store
		if out := serveRefused(t, p); !strings.Contains(out, "--accept-empty-store") || !strings.Contains(out, "etcd") {
			t.Fatalf("serve on a wiped etcd store:\n%s", out)
		}
	}
	p.serveArgs = []string{"--accept-empty-store"}
	p.Restart()
	p.Stop()
	p.serveArgs = nil
	p.Restart()
}
