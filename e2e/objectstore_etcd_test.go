package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// `precondition: etag` (S3) and `generation` (GCS) with the fences and the
// ETag bookkeeping on etcd (fence mode shared, adapters/etcd/etag.go): the
// delayed-forward race is closed (the late write fails its condition at
// the store), a write that bypassed the gateway is not overwritten, and
// the ETag key in etcd names the version the store holds.
func TestObjectStorePreconditionEtcd(t *testing.T) {
	for _, d := range []osDialect{osS3, osGCS} {
		t.Run(d.name, func(t *testing.T) {
			d := osKeyAlone(d)
			t.Run("delayed", func(t *testing.T) {
				cluster := testenv.Etcd(t, 1)
				e, got := osDelayedRace(t, d, etcdObjectStore(cluster.Endpoints), d.precondition)
				if got != "B" {
					t.Fatalf("object = %q; want B's (the delayed write must fail its precondition at the store)", got)
				}
				rec := etcdETag(t, cluster.Endpoints, osBucket+"/job")
				if want := strings.Trim(e.s.read(t, "job").Version, `"`); rec.ETag != want || rec.Token != 2 {
					t.Fatalf("etcd etag record %+v; want the store's %q recorded by token 2", rec, want)
				}
			})
			t.Run("bypass", func(t *testing.T) {
				cluster := testenv.Etcd(t, 1)
				e := startOSStore(t, d, etcdObjectStore(cluster.Endpoints), d.precondition)
				osBypassOn(t, e)
				// The refused write left the record as it was: the
				// gateway's last write (v2), not the bypassing version.
				rec := etcdETag(t, cluster.Endpoints, osBucket+"/k")
				if rec.ETag == "" || rec.ETag == "?" || rec.ETag == strings.Trim(e.s.read(t, "k").Version, `"`) {
					t.Fatalf("etcd etag record %+v; want v2's, not the bypassing object's", rec)
				}
			})
		})
	}
}

// osKeyAlone is d with routes that fence each object on its own
// (hierarchical: false): the etcd shared fence does not implement
// hierarchical keys, and the contract's objects are flat.
func osKeyAlone(d osDialect) osDialect {
	start := d.start
	d.start = func(t *testing.T) *osStore {
		s := start(t)
		route := s.route
		s.route = func(name, host, endpoint, precondition, timeout string) string {
			return route(name, host, endpoint, precondition, timeout) + "      hierarchical: false\n"
		}
		return s
	}
	return d
}

// etcdObjectStore is the store section of a gateway in fence mode shared
// on the etcd cluster of endpoints (the object-store tests' tokens are
// their own: unverified).
func etcdObjectStore(endpoints []string) string {
	return fmt.Sprintf("store:\n  etcd: {endpoints: [%s], prefix: /fg, lease_ttl: 2s, timeout: 2s}\nfence: {mode: shared}\n", quoteList(endpoints))
}

// etcdETagRecord is the value of an ETag key (adapters/etcd/etag.go).
type etcdETagRecord struct {
	ETag  string `json:"e"`
	Token int64  `json:"t"`
}

// etcdETag reads resource's ETag record straight from etcd.
func etcdETag(t *testing.T, endpoints []string, resource string) etcdETagRecord {
	t.Helper()
	cli := etcdClient(t, endpoints...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/fg/e/"+resource)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("no etag record of %s in etcd", resource)
	}
	var r etcdETagRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		t.Fatalf("etag record of %s: %v", resource, err)
	}
	return r
}
