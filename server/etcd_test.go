package server

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// etcdOrdersYAML is a config of one route on store.etcd; %s is the
// route's further lines.
const etcdOrdersYAML = `
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: "http://127.0.0.1:9"}
      resource: "{path}"
%s
store:
  etcd: {endpoints: ["http://127.0.0.1:2379"]}
fence: {mode: shared}
`

// The etcd shared fence implements hierarchical keys (gateway.TreeFence):
// a hierarchical route (the default for a {path} key) is built on it when
// routes are built (start, reload, validate), as one declared
// hierarchical: false is.
func TestEtcdBuildsHierarchicalRoutes(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		extra        string
		hierarchical bool
	}{{"", true}, {"      hierarchical: true", true}, {"      hierarchical: false", false}} {
		cfg, err := config.Parse("etcd.yaml", []byte(strings.Replace(etcdOrdersYAML, "%s", tt.extra, 1)))
		if err != nil {
			t.Fatal(err)
		}
		routes, err := BuildRoutes(cfg, log)
		if err != nil {
			t.Errorf("%q: BuildRoutes: %v", tt.extra, err)
			continue
		}
		if got := routes[0].Hierarchical(); got != tt.hierarchical {
			t.Errorf("%q: hierarchical %v; want %v", tt.extra, got, tt.hierarchical)
		}
	}
}
