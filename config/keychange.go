package config

import (
	"fmt"
	"slices"
	"strings"
)

// KeyChange is one way a new configuration changes how an existing route
// builds resource keys. Applied by a reload, it
// would silently move every resource of the route to a fresh, empty fence:
// a stale token that the old key's fence refuses would be accepted under
// the new key. A reload applies key changes only when the route's
// key_version changes too (Confirmed); a restart applies anything.
type KeyChange struct {
	Route     string // route name ("" for a gateway-wide setting)
	Field     string // field path in the new configuration
	Msg       string // what changed, in the file's terms
	Confirmed bool   // the route's key_version changed with it
}

func (k KeyChange) String() string {
	s := k.Field + ": " + k.Msg
	if k.Route != "" {
		s = fmt.Sprintf("route %q: %s", k.Route, s)
	}
	return s
}

// KeyChanges lists how next changes the key building of old's routes,
// matched by name: the resource template, case_insensitive, match (host,
// path_prefix, methods), the kind of upstream and s3.virtual_host_suffix,
// and the earlier routes that overlap it (a route added, removed or moved
// in front of it takes or gives up some of its requests). A route only in
// next builds no keys yet, and a removed route's requests are reported on
// the route that receives them. gateway.token_header is reported as a
// change that needs a restart (never Confirmed): it decides where tokens
// are read from for every route.
func KeyChanges(old, next *Config) []KeyChange {
	if old.Gateway == nil || next.Gateway == nil {
		return nil
	}
	var out []KeyChange
	if old.Gateway.TokenHeader != next.Gateway.TokenHeader {
		out = append(out, KeyChange{Field: "gateway.token_header",
			Msg: fmt.Sprintf("%q -> %q: needs a restart", old.Gateway.TokenHeader, next.Gateway.TokenHeader)})
	}
	oldRoutes := old.Gateway.Routes
	for j := range next.Gateway.Routes {
		nr := &next.Gateway.Routes[j]
		i := slices.IndexFunc(oldRoutes, func(r Route) bool { return r.Name == nr.Name })
		if i < 0 {
			continue
		}
		or := &oldRoutes[i]
		f := fmt.Sprintf("gateway.routes[%d]", j)
		confirmed := or.KeyVersion != nr.KeyVersion
		add := func(field, format string, args ...any) {
			msg := old.src.redact(next.src.redact(fmt.Sprintf(format, args...), ""), "")
			out = append(out, KeyChange{Route: nr.Name, Field: f + field, Msg: msg, Confirmed: confirmed})
		}
		if or.Resource != nr.Resource {
			add(".resource", "%q -> %q", or.Resource, nr.Resource)
		}
		if or.CaseInsensitive != nr.CaseInsensitive {
			add(".case_insensitive", "%v -> %v", or.CaseInsensitive, nr.CaseInsensitive)
		}
		if !strings.EqualFold(or.Match.Host, nr.Match.Host) {
			add(".match.host", "%q -> %q", or.Match.Host, nr.Match.Host)
		}
		if or.Match.PathPrefix != nr.Match.PathPrefix {
			add(".match.path_prefix", "%q -> %q", or.Match.PathPrefix, nr.Match.PathPrefix)
		}
		if !sameSet(or.Match.Methods, nr.Match.Methods) {
			add(".match.methods", "%v -> %v", or.Match.Methods, nr.Match.Methods)
		}
		if (or.S3 == nil) != (nr.S3 == nil) {
			add("", "the upstream changed between http and s3")
		} else if or.S3 != nil && or.S3.VirtualHostSuffix != nr.S3.VirtualHostSuffix {
			add(".s3.virtual_host_suffix", "%q -> %q", or.S3.VirtualHostSuffix, nr.S3.VirtualHostSuffix)
		}
		if a, b := overlapping(oldRoutes, i), overlapping(next.Gateway.Routes, j); !slices.Equal(a, b) {
			add("", "the routes in front of it that can take its requests changed from %v to %v", quoteAll(a), quoteAll(b))
		}
	}
	return out
}

// overlapping names the routes before rs[i] that some of its requests
// could match, sorted.
func overlapping(rs []Route, i int) []string {
	var names []string
	for k := range rs[:i] {
		if routesOverlap(&rs[k], &rs[i]) {
			names = append(names, rs[k].Name)
		}
	}
	slices.Sort(names)
	return names
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func quoteAll(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

// KeyChangeError refuses a reload that changes key building without the
// operator's confirmation.
type KeyChangeError struct {
	Changes []KeyChange // the unconfirmed ones
}

func (e *KeyChangeError) Error() string {
	s := make([]string, len(e.Changes))
	for i, c := range e.Changes {
		s[i] = c.String()
	}
	return "the new configuration changes how resource keys are built, which would move resources to fresh, empty fences; " +
		"change the route's key_version to confirm (gateway.token_header: restart): " + strings.Join(s, "; ")
}
