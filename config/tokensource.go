package config

import (
	"fmt"
	"github.com/fencegate/fencegate/resource"
	"net"
	"slices"
	"strings"
	"time"
)

// TokenSource names the lock service outside fencegate whose tokens a route
// accepts, and against which the gateway verifies each new token (package
// adapters/etcd, adapters/zookeeper). Exactly one field is set. A route
// without one takes fencegate's own coordinator's tokens (verified when
// the coordinator shares the store, see fence.verify_tokens).
type TokenSource struct {
	Etcd      *EtcdSource      `yaml:"etcd"`
	ZooKeeper *ZooKeeperSource `yaml:"zookeeper"`
}

// EtcdSource: tokens are the create revisions of the keys of etcd's lock
// recipe (client/v3/concurrency.Mutex, etcdctl lock) named Prefix joined
// with the resource key.
type EtcdSource struct {
	// Endpoints are the cluster's client URLs (http://127.0.0.1:2379).
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the lock name's prefix: a lock on resource /orders/7 is
	// named Prefix + "/orders/7" (a single / between them).
	Prefix string `yaml:"prefix"`
	// Username and Password authenticate to etcd, if it has auth on.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS, if set, reaches the endpoints (all https://) over TLS, with a
	// client certificate if the cluster asks for one.
	TLS *EtcdTLS `yaml:"tls"`
	// Timeout bounds one verification read. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
}

// ZooKeeperSource: tokens are the czxids of the lock nodes of ZooKeeper's
// lock recipe (Curator's InterProcessMutex) under Path joined with the
// resource key.
type ZooKeeperSource struct {
	// Servers are the ensemble's host:port addresses.
	Servers []string `yaml:"servers"`
	// Path is the lock path's prefix: a lock on resource /orders/7 is the
	// znode Path + "/orders/7", its lock nodes the children of it.
	Path string `yaml:"path"`
	// SessionTimeout is the gateway's session with the ensemble. Default 10s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// Timeout bounds one verification. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
}

// Identity names the lock service: two routes with the same identity take
// tokens from one sequence. "" is fencegate's own coordinator.
func (s *TokenSource) Identity() string {
	switch {
	case s == nil:
		return ""
	case s.Etcd != nil:
		eps := slices.Clone(s.Etcd.Endpoints)
		slices.Sort(eps)
		return "etcd " + strings.Join(eps, ",") + " " + resource.LockName(s.Etcd.Prefix, "")
	case s.ZooKeeper != nil:
		srv := slices.Clone(s.ZooKeeper.Servers)
		slices.Sort(srv)
		return "zookeeper " + strings.Join(srv, ",") + " " + resource.LockName(s.ZooKeeper.Path, "")
	}
	return ""
}

// Kind is "etcd" or "zookeeper" ("" without a source).
func (s *TokenSource) Kind() string {
	switch {
	case s == nil:
		return ""
	case s.Etcd != nil:
		return "etcd"
	case s.ZooKeeper != nil:
		return "zookeeper"
	}
	return ""
}

// validateTokenSources checks each route's token_source and that no
// resource key can be produced by two routes whose tokens come from
// different sources: the numbers of two lock services are not ordered
// against each other, so one resource fenced by both would refuse the
// current owner of one whenever the other's count is ahead.
func (c *Config) validateTokenSources() Errors {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Gateway == nil {
		return nil
	}
	for i := range c.Gateway.Routes {
		ts := c.Gateway.Routes[i].TokenSource
		if ts == nil {
			continue
		}
		f := fmt.Sprintf("gateway.routes[%d].token_source", i)
		switch {
		case ts.Etcd != nil && ts.ZooKeeper != nil:
			add(f, "set either etcd or zookeeper, not both")
		case ts.Etcd != nil:
			e := ts.Etcd
			errs = append(errs, validateEtcdClient(f+".etcd", e.Endpoints, e.Username, e.Password, e.TLS)...)
			if !strings.HasPrefix(e.Prefix, "/") {
				add(f+".etcd.prefix", "required, starting with / (e.g. /fencegate/locks): the lock of resource R is named prefix + R")
			}
			if e.Timeout < 0 {
				add(f+".etcd.timeout", "must not be negative (0: the default, 2s)")
			}
		case ts.ZooKeeper != nil:
			z := ts.ZooKeeper
			if len(z.Servers) == 0 {
				add(f+".zookeeper.servers", "at least one host:port is required")
			}
			for j, s := range z.Servers {
				if _, _, err := net.SplitHostPort(s); err != nil {
					add(fmt.Sprintf("%s.zookeeper.servers[%d]", f, j), "must be host:port")
				}
			}
			if !strings.HasPrefix(z.Path, "/") || (len(z.Path) > 1 && strings.HasSuffix(z.Path, "/")) {
				add(f+".zookeeper.path", "required, starting with / and not ending with one (e.g. /fencegate/locks)")
			}
			if z.Timeout < 0 || z.SessionTimeout < 0 {
				add(f+".zookeeper", "timeouts must not be negative (0: the defaults)")
			}
		default:
			add(f, "set etcd or zookeeper")
		}
	}
	routes := c.Gateway.Routes
	for i := range routes {
		for j := i + 1; j < len(routes); j++ {
			a, b := &routes[i], &routes[j]
			if a.TokenSource.Identity() == b.TokenSource.Identity() || !keysMayOverlap(a, b) {
				continue
			}
			add(fmt.Sprintf("gateway.routes[%d].token_source", j),
				"route %q (tokens from %s) may produce the same resource keys as route %q (tokens from %s): a resource must take its tokens from one source; give the routes resource templates with distinct literal prefixes",
				b.Name, sourceName(b.TokenSource), a.Name, sourceName(a.TokenSource))
		}
	}
	return errs
}

func sourceName(s *TokenSource) string {
	if s == nil {
		return "fencegate's coordinator"
	}
	return s.Kind() + " " + resource.LockName(prefixOf(s), "")
}

func prefixOf(s *TokenSource) string {
	if s.Etcd != nil {
		return s.Etcd.Prefix
	}
	return s.ZooKeeper.Path
}

// keysMayOverlap reports whether two routes could produce one resource key,
// judged from what every key of each must start with: the resource
// template's literal text before its first variable, or for a template
// starting with {path} the route's path prefix (keys are the cleaned path),
// and for one starting with {bucket} no slash (bucket names never start
// with one). Routes whose keys start with different texts cannot meet; any
// other pair might (a conservative answer).
func keysMayOverlap(a, b *Route) bool {
	pa, bucketA := keyStart(a)
	pb, bucketB := keyStart(b)
	if (bucketA && strings.HasPrefix(pb, "/")) || (bucketB && strings.HasPrefix(pa, "/")) {
		return false
	}
	if a.CaseInsensitive || b.CaseInsensitive {
		pa, pb = strings.ToLower(pa), strings.ToLower(pb)
	}
	return strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa)
}

// MayProduceKey reports whether key could be a resource key of r, judged
// as keysMayOverlap judges two routes.
func (r *Route) MayProduceKey(key string) bool {
	start, bucket := keyStart(r)
	if bucket {
		return !strings.HasPrefix(key, "/")
	}
	if r.CaseInsensitive {
		key, start = strings.ToLower(key), strings.ToLower(start)
	}
	return strings.HasPrefix(key, start)
}

// keyStart is the text every resource key of r starts with, and whether it
// starts with an S3 bucket name.
func keyStart(r *Route) (string, bool) {
	lit, rest, hasVar := strings.Cut(r.Resource, "{")
	if lit != "" || !hasVar {
		return lit, false
	}
	name, _, _ := strings.Cut(rest, "}")
	switch {
	case name == "path":
		if r.Match.PathPrefix != "" {
			return r.Match.PathPrefix, false
		}
		return "/", false
	case name == "bucket":
		return "", true
	}
	return "", false
}

// TokenSourceKey reports whether a route of c with a token_source may
// produce key: its tokens then come from that lock service, not from
// fencegate's coordinator (a store's recovery leaves its fence alone).
func (c *Config) TokenSourceKey(key string) bool {
	if c == nil || c.Gateway == nil {
		return false
	}
	for i := range c.Gateway.Routes {
		if r := &c.Gateway.Routes[i]; r.TokenSource != nil && r.MayProduceKey(key) {
			return true
		}
	}
	return false
}
