package config

import (
	"strings"
	"testing"
)

// TestEdgeValidation: TLS, auth and limit mistakes are reported with their
// field path.
func TestEdgeValidation(t *testing.T) {
	const route = `
gateway:
  routes:
    - name: r
      match: {path_prefix: /}
      upstream: {url: %s%s}
      resource: "{path}"
%s`
	hash := strings.Repeat("ab", 32)
	tests := []struct {
		name, yaml, field string
	}{
		{"short hash", cfgRoute(route, "http://u", "", `      auth: {api_keys: [{owner: a, sha256: "abc"}]}`), "gateway.routes[0].auth.api_keys[0].sha256"},
		{"upper-case hash", cfgRoute(route, "http://u", "", `      auth: {api_keys: [{owner: a, sha256: "`+strings.ToUpper(hash)+`"}]}`), "gateway.routes[0].auth.api_keys[0].sha256"},
		{"duplicate key", cfgRoute(route, "http://u", "", `      auth: {api_keys: [{owner: a, sha256: "`+hash+`"}, {owner: b, sha256: "`+hash+`"}]}`), "gateway.routes[0].auth.api_keys[1].sha256"},
		{"no owner", cfgRoute(route, "http://u", "", `      auth: {api_keys: [{sha256: "`+hash+`"}]}`), "gateway.routes[0].auth.api_keys[0].owner"},
		{"empty prefix", cfgRoute(route, "http://u", "", `      auth: {api_keys: [{owner: a, sha256: "`+hash+`", prefixes: [""]}]}`), "gateway.routes[0].auth.api_keys[0].prefixes[0]"},
		{"client certs without CA", cfgRoute(route, "http://u", "", `      auth: {client_certs: [{name: w}]}`), "gateway.routes[0].auth.client_certs"},
		{"negative in-flight cap", cfgRoute(route, "http://u", "", `      max_inflight_writes: -1`), "gateway.routes[0].max_inflight_writes"},
		{"upstream tls on http", cfgRoute(route, "http://u", ", tls: {ca_file: /x}", ""), "gateway.routes[0].upstream.tls"},
		{"half a client cert", cfgRoute(route, "https://u", ", tls: {cert_file: /x}", ""), "gateway.routes[0].upstream.tls"},
		{"unknown listener", cfgRoute(route, "http://u", "", "") + "tls: {mode: files, cert_file: a, key_file: b, listeners: [gateway, web]}\n", "tls.listeners[1]"},
		{"client CA without TLS", cfgRoute(route, "http://u", "", "") + "tls: {client_ca_file: /ca.pem}\n", "tls.client_ca_file"},
		{"bad challenge", cfgRoute(route, "http://u", "", "") + "tls: {mode: acme, acme: {domains: [gw.example.com], challenges: [dns-01]}}\n", "tls.acme.challenges[0]"},
		{"tls-alpn without gateway TLS", cfgRoute(route, "http://u", "", "") + "tls: {mode: acme, listeners: [admin], acme: {domains: [gw.example.com], challenges: [tls-alpn-01]}}\n", "tls.acme.challenges"},
		{"plain-http CA", cfgRoute(route, "http://u", "", "") + "tls: {mode: acme, acme: {domains: [gw.example.com], ca: \"http://ca/dir\"}}\n", "tls.acme.ca"},
		{"IP as domain", cfgRoute(route, "http://u", "", "") + "tls: {mode: acme, acme: {domains: [10.0.0.1]}}\n", "tls.acme.domains[0]"},
		{"admin key", cfgRoute(route, "http://u", "", "") + "admin: {auth: {api_keys: [{owner: ops, sha256: x}]}}\n", "admin.auth.api_keys[0].sha256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.yaml))
			errs, ok := err.(Errors)
			if !ok {
				t.Fatalf("err = %v; want validation errors", err)
			}
			for _, e := range errs {
				if e.Field == tc.field {
					return
				}
			}
			t.Fatalf("errors %v; want one for %s", errs, tc.field)
		})
	}

	ok := cfgRoute(route, "https://u", ", tls: {ca_file: /ca.pem, server_name: api.internal, cert_file: /c, key_file: /k}",
		`      max_inflight_writes: 8
      auth: {api_keys: [{owner: a, sha256: "`+hash+`", prefixes: [/billing/]}]}`) +
		"tls: {mode: acme, acme: {domains: [gw.example.com], email: ops@example.com}}\n"
	cfg, err := Parse("ok.yaml", []byte(ok))
	if err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	a := cfg.TLS.ACME
	if len(a.Challenges) != 2 || a.HTTPListen != ":80" || len(cfg.TLS.Listeners) != 1 || cfg.TLS.Listeners[0] != "gateway" {
		t.Fatalf("ACME defaults: challenges %v http_listen %q listeners %v", a.Challenges, a.HTTPListen, cfg.TLS.Listeners)
	}
}

func cfgRoute(format, url, upstreamExtra, routeExtra string) string {
	return strings.NewReplacer("%s%s", url+upstreamExtra, "%s", routeExtra+"\n").Replace(format)
}
