package server

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/httprefusal"
)

// guardAPI protects an operator API (admin, coordinator) from browsers:
//
//   - DNS rebinding: the Host header must name this listener: its listen
//     host, localhost, 127.0.0.1, ::1, any IP literal (an address cannot be
//     rebound), or a name in allowed_hosts. A page on evil.example whose
//     name was rebound to 127.0.0.1 sends Host: evil.example and is refused.
//   - CSRF: a request with an Origin other than the Host's own, or marked
//     Sec-Fetch-Site: cross-site, is refused; and every request other than
//     GET/HEAD/OPTIONS must be Content-Type: application/json, which a
//     cross-origin page cannot send without a CORS preflight (that this API
//     never answers). A form or text/plain POST gets 415.
//
// Probes (/healthz, /readyz) pass the same checks: they send an IP Host.
func (s *Server) guardAPI(name, listen string, g config.APIGuard, h http.Handler) http.Handler {
	allowed := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	suffixes := []string(nil)
	any := false
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		allowed[normHost(host)] = true
	}
	for _, a := range g.AllowedHosts {
		switch a = normHost(a); {
		case a == "*":
			any = true
		case strings.HasPrefix(a, "."):
			suffixes = append(suffixes, a)
		default:
			allowed[a] = true
		}
	}
	hostOK := func(hostport string) bool {
		if hostport == "" || any {
			return true // HTTP/1.0 without Host: not a browser
		}
		host := hostport
		if h, _, err := net.SplitHostPort(hostport); err == nil {
			host = h
		}
		host = normHost(host)
		if allowed[host] || net.ParseIP(host) != nil {
			return true
		}
		for _, s := range suffixes {
			if strings.HasSuffix(host, s) {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostOK(r.Host) {
			s.log.Warn("operator API request refused: Host not allowed", "listener", name, "host", clip(r.Host), "remote", r.RemoteAddr)
			httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeForbidden,
				"Host %q is not a name of the %s listener (add it to %s.allowed_hosts)", clip(r.Host), name, name))
			return
		}
		if reason := crossSite(r); reason != "" {
			s.log.Warn("operator API request refused: cross-site", "listener", name, "reason", reason, "remote", r.RemoteAddr)
			httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeForbidden,
				"cross-site request refused (%s): the %s API takes no requests from web pages", reason, name))
			return
		}
		switch {
		case r.Method == http.MethodGet, r.Method == http.MethodHead, r.Method == http.MethodOptions:
		case name == "admin" && consoleForm(r):
		default:
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				e := httprefusal.WithStatus(http.StatusUnsupportedMediaType, fencegate.Errorf(fencegate.CodeInvalidRequest,
					"%s %s needs Content-Type: application/json", r.Method, r.URL.Path))
				httprefusal.WriteJSON(w, e)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// crossSite says why r comes from another site's page, or "".
// consoleForm reports whether r is the console's login or logout form
// post, the admin listener's only requests that are not JSON: a browser
// sends a form. The cross-site checks above apply to them as to the rest;
// neither acts on a fence or a lease.
func consoleForm(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return r.Method == http.MethodPost && (r.URL.Path == "/login" || r.URL.Path == "/logout") &&
		mt == "application/x-www-form-urlencoded"
}

func crossSite(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return "Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site")
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return ""
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return "Origin " + clip(o)
	}
	if !strings.EqualFold(u.Host, r.Host) {
		return "Origin " + clip(o) + " is not this host"
	}
	return ""
}

func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// clip bounds client input echoed in replies and logs.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
