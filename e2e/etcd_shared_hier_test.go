package e2e

// Hierarchical keys in fence mode shared on etcd: two real fencegate
// replicas over a three-member etcd cluster in front of Apache mod_dav,
// checked on the files Apache holds, as shared_hier_test.go does over
// PostgreSQL.

import (
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// etcdDAVYAML is one replica of a WebDAV route (as sharedDAVYAML takes it)
// in fence mode shared on the etcd cluster of endpoints.
func etcdDAVYAML(route string, endpoints []string) string {
	return "gateway:\n  listen: $GATEWAY\n  routes:\n" + route + fmt.Sprintf(`store:
  etcd: {endpoints: [%s], prefix: /fg, lease_ttl: 2s, timeout: 2s}
fence: {mode: shared}
admin: {listen: $ADMIN}
`, quoteList(endpoints))
}

// TestEtcdSharedDAVDefaultRouteTrees is TestSharedDAVDefaultRouteTrees on
// etcd: a hierarchical route (the default for a {path} key) is served on
// store.etcd; a DELETE or MOVE of a collection older than a member's token
// written through the other replica is refused and the member's file stays
// on Apache; the collection owner's newer DELETE goes through, and an
// older member write after it is refused and never reaches Apache.
func TestEtcdSharedDAVDefaultRouteTrees(t *testing.T) {
	c := testenv.Etcd(t, 3)
	s := apacheDAV(t)
	r := sharedReplicas(t, 2, etcdDAVYAML(davDefaultRouteYAML(s), c.Endpoints))
	davCollTrees(t, s, "http://"+r[0].addrs["gateway"], "http://"+r[1].addrs["gateway"])
}
