package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/fencegate/fencegate"
)

// Warnings are settings that are legal but probably not what was meant.
// They never stop serve; `fencegate validate` prints them and serve logs
// them at start and on reload.
type Warnings []*FieldError

// Warnings reports every legal but surprising setting of c, with field
// paths (and file:line when c came from Parse). It has no side effects.
func (c *Config) Warnings() Warnings {
	var ws Warnings
	add := func(field, format string, args ...any) {
		ws = append(ws, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.src != nil {
		for _, e := range c.src.env {
			for _, name := range e.empty {
				add(e.path, "${%s} is set but empty (in %s)", name, e.ref)
			}
		}
	}
	if e := c.Store.Etcd; e != nil {
		if w := etcdClientWarning(e.Endpoints, e.Username, e.TLS); w != "" {
			add("store.etcd", "%s", w)
		}
	}
	if c.Store.Marker != "" {
		add("store.marker", "deprecated: renamed store.identity_file (same meaning, same default file)")
	}
	if c.Gateway != nil {
		rs := c.Gateway.Routes
		for j := range rs {
			later := &rs[j]
			f := fmt.Sprintf("gateway.routes[%d]", j)
			// The forward sends no user info: credentials written into the
			// URL reach nobody, and only the address is echoed (redacted).
			if u := later.Upstream; u != nil {
				if pu, err := url.Parse(u.URL); err == nil && pu.User != nil {
					add(f+".upstream.url", "user info in the URL is not sent upstream (deprecated; it will be refused): "+
						"set credentials with upstream.headers, e.g. Authorization")
				}
			}
			if ts := later.TokenSource; ts != nil && ts.Etcd != nil {
				if w := etcdClientWarning(ts.Etcd.Endpoints, ts.Etcd.Username, ts.Etcd.TLS); w != "" {
					add(f+".token_source.etcd", "%s", w)
				}
			}
			// Off on a route keyed by the path, a DELETE or MOVE of a
			// collection is not checked against its members' tokens.
			if h := later.Hierarchical; h != nil && !*h && later.Upstream != nil && strings.HasSuffix(later.Resource, "{path}") {
				add(f+".hierarchical", "false on a route keyed by the path: a DELETE or MOVE of a collection is not checked against its members' newer tokens "+
					"and removes them; safe only where no request changes the keys below the one it names (`fencegate doctor` finds WebDAV upstreams)")
			}
			// fenced_methods narrows what is fenced; a write method the
			// route matches but leaves out goes upstream unchecked, which
			// is legal but rarely meant when the route names it.
			if len(later.FencedMethods) > 0 {
				for k, m := range later.Match.Methods {
					if !fencegate.ReadMethod(m) && !slices.Contains(later.FencedMethods, m) {
						add(fmt.Sprintf("%s.match.methods[%d]", f, k),
							"%s matches this route but is not in fenced_methods: such writes are forwarded without a fence check", m)
					}
				}
			}
			for i := range rs[:j] {
				earlier := &rs[i]
				if !routesOverlap(earlier, later) {
					continue
				}
				if shadows(earlier, later) {
					add(f, "never matches: route %q before it takes every request this route would", earlier.Name)
					break
				}
				// A case variant of a case-insensitive
				// route's prefix must not be fenced under another key by a
				// later route.
				if earlier.CaseInsensitive && !strings.HasPrefix(later.Match.PathPrefix, earlier.Match.PathPrefix) &&
					!(later.CaseInsensitive && later.Resource == earlier.Resource) {
					add(f+".match.path_prefix", "%q also covers case variants of %q (e.g. %q), the prefix of case-insensitive route %q: "+
						"they are fenced under that route's keys only while it matches them first; make this route case_insensitive with the same resource, or narrow its prefix",
						later.Match.PathPrefix, earlier.Match.PathPrefix, strings.ToUpper(earlier.Match.PathPrefix), earlier.Name)
				}
			}
		}
	}
	if c.src != nil {
		c.src.locate(ws)
	}
	return ws
}

// routesOverlap reports whether some request could match both routes,
// comparing prefixes without case when either route is case-insensitive.
func routesOverlap(a, b *Route) bool {
	if a.Match.Host != "" && b.Match.Host != "" && !strings.EqualFold(strings.TrimSuffix(a.Match.Host, "."), strings.TrimSuffix(b.Match.Host, ".")) {
		return false
	}
	if len(a.Match.Methods) > 0 && len(b.Match.Methods) > 0 && !slices.ContainsFunc(a.Match.Methods, func(m string) bool { return slices.Contains(b.Match.Methods, m) }) {
		return false
	}
	pa, pb := a.Match.PathPrefix, b.Match.PathPrefix
	if a.CaseInsensitive || b.CaseInsensitive {
		pa, pb = strings.ToLower(pa), strings.ToLower(pb)
	}
	return strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa)
}

// shadows reports whether route a, tried first, takes every request route b
// would match.
func shadows(a, b *Route) bool {
	if a.Match.Host != "" && !strings.EqualFold(strings.TrimSuffix(a.Match.Host, "."), strings.TrimSuffix(b.Match.Host, ".")) {
		return false
	}
	if len(a.Match.Methods) > 0 && (len(b.Match.Methods) == 0 || slices.ContainsFunc(b.Match.Methods, func(m string) bool { return !slices.Contains(a.Match.Methods, m) })) {
		return false
	}
	return strings.HasPrefix(b.Match.PathPrefix, a.Match.PathPrefix)
}
