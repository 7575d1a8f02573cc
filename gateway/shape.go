package gateway

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate"
)

// Request-shape checks: requests whose form would let the upstream act on
// something other than what the gateway checked are refused before the fence
// (docs/design.md I7: the request forwarded is the request that was checked).

// methodOverrideHeaders make frameworks (Rails, Laravel, Express's
// method-override, ASP.NET, Symfony) apply another method than the one sent:
// a fenced DELETE could ride on an unfenced GET. They are refused, never
// stripped: a client sending one expects its effect.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// checkMethod refuses a method with a lower-case letter (invalid_method).
// Method names are case-sensitive (RFC 9110 §9.1) and every registered one
// is upper case, but many upstreams fold case (werkzeug, Rack, PHP): "put"
// would be checked as an unknown method and applied as PUT. No spelling is
// folded here either: a refusal keeps the check and the forward identical.
func checkMethod(r *http.Request) *fencegate.Error {
	m := r.Method
	for i := 0; i < len(m); i++ {
		if c := m[i]; c >= 'a' && c <= 'z' {
			return fencegate.InvalidMethod("method %q is not in canonical form: HTTP methods are case-sensitive; send %s",
				bounded(m), bounded(strings.ToUpper(m)))
		}
	}
	for _, h := range methodOverrideHeaders {
		if _, ok := r.Header[h]; ok {
			return fencegate.InvalidMethod("%s is refused: the gateway fences the method sent, and an override would make the upstream apply another", h)
		}
	}
	// The same override as a POST's query parameter (Laravel, Symfony,
	// Express's method-override with a query getter). A _method field of a
	// form body (Rails) is not read here: a route that leaves POST
	// unfenced must not front such an upstream.
	if raw := r.URL.RawQuery; m == http.MethodPost && (strings.Contains(raw, "method") || strings.IndexByte(raw, '%') >= 0) {
		q, _ := url.ParseQuery(raw)
		for k := range q {
			if phpName.Replace(k) == methodOverrideParam {
				return fencegate.InvalidMethod("the %s query parameter is refused: the gateway fences the method sent, and an override would make the upstream apply another", methodOverrideParam)
			}
		}
	}
	return nil
}

// methodOverrideParam is the parameter frameworks read a POST's method
// override from.
const methodOverrideParam = "_method"

// phpName spells a parameter name as PHP reads it: " " and "." become "_".
var phpName = strings.NewReplacer(" ", "_", ".", "_")

// hopFields are the standard hop-by-hop fields a client may name in
// Connection (RFC 9110 §7.6.1, RFC 7540 §3.2 for HTTP2-Settings).
var hopFields = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Http2-Settings": true,
}

// checkHeaders refuses (400 invalid_request) requests whose headers would
// change between the gateway's decision and the upstream:
//
//   - Connection naming a header the gateway decided on (token, Host,
//     Authorization, a {header.X} of the template) or any other header the
//     request carries: the proxy drops such headers (RFC 9110 §7.6.1), so
//     the upstream would not see what the gateway checked.
//   - A declared trailer with the name of a decided header or of a header
//     the request carries: it arrives after the check, and upstreams that
//     merge trailers into headers would act on it.
//   - A header spelled like a decided one up to case and '-' versus '_'
//     (X_Tenant for X-Tenant): CGI-style upstreams (WSGI, PHP, Rack)
//     conflate both into HTTP_X_TENANT.
func checkHeaders(r *http.Request, decided []string) *fencegate.Error {
	isDecided := func(k string) bool {
		for _, d := range decided {
			if d == k {
				return true
			}
		}
		return false
	}
	for _, v := range r.Header["Connection"] {
		for opt := range strings.SplitSeq(v, ",") {
			opt = textproto.TrimString(opt)
			if opt == "" {
				continue
			}
			k := textproto.CanonicalMIMEHeaderKey(opt)
			_, present := r.Header[k]
			if isDecided(k) || (present && !hopFields[k]) {
				return fencegate.InvalidRequest(
					"Connection names %s: the gateway would drop it after deciding on this request", bounded(k))
			}
		}
	}
	for k := range r.Trailer {
		if _, present := r.Header[k]; present || isDecided(k) {
			return fencegate.InvalidRequest(
				"trailer %s is refused: it would arrive after the gateway decided on the request's headers", bounded(k))
		}
	}
	for k := range r.Header {
		for _, d := range decided {
			if k != d && aliasOf(k, d) {
				return fencegate.InvalidRequest(
					"header %s is refused: upstreams may read it as %s, which the gateway decided on", bounded(k), d)
			}
		}
	}
	return nil
}

// decidedHeaders are the headers route rt's decision rests on.
func (g *Gateway) decidedHeaders(rt *Route) []string {
	return append([]string{g.tokenHeader, "Host", "Authorization"}, rt.decided...)
}

// aliasOf reports whether header names a and b are one name to CGI-style
// servers: equal up to ASCII case, with '_' and '-' interchangeable.
func aliasOf(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// maxEcho bounds how much client input a refusal repeats (resource, message).
const maxEcho = 256

// bounded returns s cut to maxEcho bytes (at a rune boundary) with "…".
func bounded(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	i := maxEcho
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// boundedError returns e, or a copy with its client-facing strings bounded.
func boundedError(e *fencegate.Error) *fencegate.Error {
	if len(e.Resource) <= maxEcho && len(e.Message) <= maxEcho {
		return e
	}
	c := *e
	c.Resource, c.Message = bounded(e.Resource), bounded(e.Message)
	return &c
}
