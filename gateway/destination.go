package gateway

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/resource"
)

// destination derives the key of the resource a request's Destination
// header names (RFC 4918 §10.3: an absolute URI, or an absolute path
// some clients send), as a request to that path would be keyed. The
// target must be a resource of the same route on the same host; the
// request forwarded carries the Destination with its path in the
// canonical form the key was derived from (I7: the request forwarded is
// the request checked). No Destination: "" (the upstream refuses a COPY
// or MOVE without one, and writes nothing).
func (g *Gateway) destination(r *http.Request, rt *Route, host string, insp Inspection) (*http.Request, string, *fencegate.Error) {
	vs := r.Header.Values("Destination")
	switch {
	case len(vs) == 0:
		return r, "", nil
	case len(vs) > 1:
		return r, "", fencegate.InvalidRequest("Destination must be sent once")
	}
	u, err := url.Parse(strings.TrimSpace(vs[0]))
	if err != nil || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		(u.Host == "") != (u.Scheme == "") || !strings.HasPrefix(u.EscapedPath(), "/") {
		return r, "", fencegate.InvalidRequest("Destination is not an absolute http(s) URI or path")
	}
	if u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https" {
		return r, "", fencegate.InvalidRequest("Destination is not an absolute http(s) URI or path")
	}
	if u.Host != "" && canonicalHost(u.Host) != host {
		return r, "", foreign("Destination names another host than the request; the gateway fences only its own targets")
	}
	escaped := u.EscapedPath()
	segs, err := resource.CleanPath(escaped)
	if err != nil {
		return r, "", fencegate.InvalidResource("refused Destination path: %s", err)
	}
	dpath := resource.JoinPath(segs, len(segs) > 0 && strings.HasSuffix(escaped, "/"))
	if other := g.match(host, dpath, r.Method); other != rt {
		name := "no route"
		if other != nil {
			name = "route " + other.Name
		}
		return r, "", foreign("Destination belongs to %s, not to route %s, which fences this request", name, rt.Name)
	}
	keys, ref := rt.resources(host, dpath, segs, r.Header, insp)
	if ref != nil {
		return r, "", ref
	}
	if len(keys) != 1 {
		return r, "", fencegate.InvalidResource("Destination maps to %d resources", len(keys))
	}
	if dpath != escaped {
		u.RawPath, u.Path = "", ""
		canon := *u
		if p, err := url.PathUnescape(dpath); err == nil {
			canon.Path, canon.RawPath = p, dpath
		}
		r = r.Clone(r.Context())
		r.Header.Set("Destination", canon.String())
	}
	return r, keys[0], nil
}

func foreign(format string, args ...any) *fencegate.Error {
	return fencegate.Errorf(fencegate.CodeForeignDestination, format, args...)
}
