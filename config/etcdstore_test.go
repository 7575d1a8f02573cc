package config

import (
	"strings"
	"testing"
	"time"
)

const etcdStore = "store:\n  etcd: {endpoints: [\"http://127.0.0.1:2379\"]}\nfence: {mode: shared}\n"

func TestEtcdStoreDefaults(t *testing.T) {
	cfg, err := Parse("etcd.yaml", []byte(good+etcdStore))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Store.Etcd
	if e == nil || cfg.Store.Embedded != nil {
		t.Fatalf("store %+v: want etcd alone", cfg.Store)
	}
	if e.Prefix != "/fencegate" || e.LeaseTTL != 10*time.Second || e.Timeout != 5*time.Second {
		t.Fatalf("defaults %+v", e)
	}
	if cfg.SharedRecords() {
		t.Fatal("etcd keeps no lease records: token verification must not default on")
	}
}

// A precondition route runs on etcd: the ETags are kept beside the fence
// records (adapters/etcd/etag.go).
func TestEtcdStorePrecondition(t *testing.T) {
	if _, err := Parse("etcd.yaml", []byte(good+"      precondition: etag\n"+etcdStore)); err != nil {
		t.Fatal(err)
	}
}

func TestEtcdStoreErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string
	}{
		{"local mode", good + strings.Replace(etcdStore, "shared", "local", 1), "store.etcd: needs fence.mode: shared"},
		{"with postgres", good + "store:\n  etcd: {endpoints: [\"http://a:2379\"]}\n  postgres: {url: \"postgres://x\"}\nfence: {mode: shared}\n", "set exactly one of embedded, postgres or etcd"},
		{"no endpoints", good + "store:\n  etcd: {endpoints: []}\nfence: {mode: shared}\n", "store.etcd.endpoints: at least one"},
		{"endpoint with credentials", good + strings.Replace(etcdStore, "http://127.0.0.1", "http://u:p@127.0.0.1", 1), "must be an http(s) URL without credentials"},
		{"prefix", good + strings.Replace(etcdStore, "]}", "], prefix: fg/}", 1), "store.etcd.prefix"},
		{"short lease", good + strings.Replace(etcdStore, "]}", "], lease_ttl: 1s}", 1), "store.etcd.lease_ttl"},
		{"fractional lease", good + strings.Replace(etcdStore, "]}", "], lease_ttl: 2500ms}", 1), "store.etcd.lease_ttl"},
		{"username alone", good + strings.Replace(etcdStore, "]}", "], username: fg}", 1), "set username and password together"},
		{"coordinator", good + etcdStore + "coordinator: {enabled: true}\n", "coordinator.enabled: the coordinator keeps its leases"},
		{"verify tokens", good + strings.Replace(etcdStore, "mode: shared", "mode: shared, verify_tokens: true", 1), "fence.verify_tokens: store.etcd keeps no lease records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v; want one containing %q", err, tt.want)
			}
		})
	}
}
