package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// EtcdStore is an etcd cluster as the store of a shared fence
// (adapters/etcd.SharedFence, docs/shared-fence.md): several gateway
// replicas, no PostgreSQL. It serves fence.mode shared only: a local fence
// keeps its decisions in this process's memory and gains nothing from a
// quorum store that an embedded file does not give it.
type EtcdStore struct {
	// Endpoints are the cluster's client URLs (http://10.0.0.1:2379).
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the key prefix of every key the fence keeps (fences,
	// in-flight markers, replicas). Default /fencegate.
	Prefix string `yaml:"prefix" jsonschema:"default=/fencegate"`
	// Username and Password authenticate to etcd, if it has auth on.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS reaches the cluster over TLS (as token_source.etcd.tls).
	TLS *EtcdTLS `yaml:"tls"`
	// LeaseTTL is the TTL of the replica's one etcd lease, which its
	// in-flight markers are attached to: a replica that stops renewing it
	// (killed, paused, cut off) loses its markers after this long, and
	// aborts its own forwards once it can no longer prove the lease alive.
	// Default 10s; at least 2s.
	LeaseTTL time.Duration `yaml:"lease_ttl" jsonschema:"default=10s"`
	// Timeout bounds one request to etcd that waits for no other writer.
	// Default 5s.
	Timeout time.Duration `yaml:"timeout" jsonschema:"default=5s"`
}

// DefaultEtcdPrefix is store.etcd.prefix's default.
const DefaultEtcdPrefix = "/fencegate"

func (c *Config) applyEtcdStoreDefaults() {
	e := c.Store.Etcd
	if e == nil {
		return
	}
	if e.Prefix == "" {
		e.Prefix = DefaultEtcdPrefix
	}
	if e.LeaseTTL == 0 {
		e.LeaseTTL = 10 * time.Second
	}
	if e.Timeout == 0 {
		e.Timeout = 5 * time.Second
	}
}

// validateStoreKind checks that exactly one store is set and that the etcd
// store is used only where it works.
func (c *Config) validateStoreKind() Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	n := 0
	for _, set := range []bool{c.Store.Embedded != nil, c.Store.Postgres != nil, c.Store.Etcd != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		add("store", "set exactly one of embedded, postgres or etcd")
	}
	e := c.Store.Etcd
	if e == nil {
		return errs
	}
	errs = append(errs, validateEtcdClient("store.etcd", e.Endpoints, e.Username, e.Password, e.TLS)...)
	for i, ep := range e.Endpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			add(fmt.Sprintf("store.etcd.endpoints[%d]", i), "must be an http(s) URL without credentials, e.g. http://127.0.0.1:2379")
		}
	}
	if !strings.HasPrefix(e.Prefix, "/") || strings.HasSuffix(e.Prefix, "/") && e.Prefix != "/" {
		add("store.etcd.prefix", "must start with / and not end with one (e.g. /fencegate)")
	}
	if e.LeaseTTL < 2*time.Second || e.LeaseTTL%time.Second != 0 {
		add("store.etcd.lease_ttl", "must be whole seconds, at least 2s (etcd leases count in seconds)")
	}
	if e.Timeout < 0 {
		add("store.etcd.timeout", "must not be negative (0: the default, 5s)")
	}
	if c.Fence.Mode != "shared" {
		add("store.etcd", "needs fence.mode: shared (a local fence gains nothing from etcd; use store.embedded)")
	}
	if c.Coordinator.Enabled {
		add("coordinator.enabled", "the coordinator keeps its leases in store.embedded or store.postgres, not yet in store.etcd: run it elsewhere, or take tokens from etcd's lock recipe (a route's token_source.etcd)")
	}
	if v := c.Fence.VerifyTokens; v != nil && *v {
		add("fence.verify_tokens", "store.etcd keeps no lease records to verify tokens against: verify them at the route (token_source) or bound them with fence.max_advance")
	}
	return errs
}

// SharedRecords reports whether the fence's store holds the coordinator's
// lease records for every replica (shared mode on PostgreSQL), which turns
// token verification on by default.
func (c *Config) SharedRecords() bool {
	return c.Fence.Mode == "shared" && c.Store.Postgres != nil
}
