package server

import (
	"errors"
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

// The etcd shared fence decides each key alone: a hierarchical route
// (the default for a {path} key) is refused when routes are built (start,
// reload, validate), one declared hierarchical: false is built.
func TestEtcdRefusesHierarchicalRoutes(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		extra string
		ok    bool
	}{{"", false}, {"      hierarchical: true", false}, {"      hierarchical: false", true}} {
		cfg, err := config.Parse("etcd.yaml", []byte(strings.Replace(etcdOrdersYAML, "%s", tt.extra, 1)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = BuildRoutes(cfg, log)
		if tt.ok != (err == nil) || err != nil && !errors.Is(err, errEtcdTree) {
			t.Errorf("%q: BuildRoutes: %v; want ok=%v", tt.extra, err, tt.ok)
		}
	}
}
