package config

import (
	"fmt"
	"strings"
	"testing"
)

// listenYAML is a gateway, admin and coordinator on the given addresses.
func listenYAML(gateway, admin, coordinator string) string {
	return fmt.Sprintf(`gateway:
  listen: %q
  routes:
    - name: r
      match: {path_prefix: /}
      upstream: {url: http://u}
      resource: "{path}"
admin: {listen: %q}
coordinator: {enabled: true, listen: %q}
`, gateway, admin, coordinator)
}

// TestListenerAddresses: what net.Listen would refuse at serve, validate
// refuses first, with the field and line.
func TestListenerAddresses(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // "" = valid
	}{
		{"distinct ports", listenYAML("127.0.0.1:8080", "127.0.0.1:9090", "127.0.0.1:8081"), ""},
		{"same address", listenYAML("127.0.0.1:8080", "127.0.0.1:8080", "127.0.0.1:8081"), "t.yaml:8: admin.listen: \"127.0.0.1:8080\" takes the same port as gateway.listen"},
		{"empty host and wildcard", listenYAML(":8080", "0.0.0.0:8080", "127.0.0.1:8081"), "admin.listen"},
		{"IPv6 wildcard and loopback", listenYAML("127.0.0.1:8080", "127.0.0.1:9090", "[::]:8080"), "t.yaml:9: coordinator.listen"},
		{"wildcard and IPv6 loopback", listenYAML("0.0.0.0:8080", "[::1]:8080", "127.0.0.1:8081"), "admin.listen"},
		{"localhost and loopback", listenYAML("localhost:8080", "127.0.0.1:9090", "127.0.0.1:8080"), "coordinator.listen"},
		{"mapped IPv4", listenYAML("127.0.0.1:8080", "[::ffff:127.0.0.1]:8080", "127.0.0.1:8081"), "admin.listen"},
		{"two loopback addresses", listenYAML("127.0.0.1:8080", "127.0.0.2:8080", "127.0.0.1:8081"), ""},
		{"port 0 twice", listenYAML("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"), ""},
		{"no port", listenYAML("8080", "127.0.0.1:9090", "127.0.0.1:8081"), "gateway.listen: \"8080\" is not host:port"},
		{"named port", listenYAML(":http", "127.0.0.1:9090", "127.0.0.1:8081"), "gateway.listen: \":http\": port must be a number"},
		{"port too large", listenYAML(":99999", "127.0.0.1:9090", "127.0.0.1:8081"), "port must be a number from 0 to 65535"},
		{"disabled coordinator", strings.Replace(listenYAML("127.0.0.1:8080", "127.0.0.1:9090", "127.0.0.1:8080"), "enabled: true", "enabled: false", 1), ""},
		{"ACME HTTP on the gateway's port", listenYAML(":80", "127.0.0.1:9090", "127.0.0.1:8081") +
			"tls: {mode: acme, acme: {domains: [gw.example.com]}}\n", "tls.acme.http_listen: \":80\" takes the same port as gateway.listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v; want one containing %q", err, tt.want)
			}
		})
	}
}

// TestS3RouteChecks: what adapters/s3 refuses at start is a validation
// error with its field path.
func TestS3RouteChecks(t *testing.T) {
	const route = `gateway:
  routes:
    - name: objects
      match: {path_prefix: /}
      s3: {endpoint: %s, access_key_id: %s, secret_access_key: %s, clients: %s}
      resource: "{bucket}/{key}"
`
	tests := []struct {
		name, endpoint, key, secret, clients, field string
	}{
		{"no clients", "http://s3", "gw", "k", "[]", "gateway.routes[0].s3.clients"},
		{"half a client", "http://s3", "gw", "k", "[{access_key_id: w}]", "gateway.routes[0].s3.clients[0]"},
		{"worker signs as the gateway", "http://s3", "gw", "k", "[{access_key_id: gw, secret_access_key: x}]", "gateway.routes[0].s3.clients[0].access_key_id"},
		{"half the gateway's key", "http://s3", "gw", `""`, "[{access_key_id: w, secret_access_key: x}]", "gateway.routes[0].s3"},
		{"relative endpoint", "s3.internal:7070", "gw", "k", "[{access_key_id: w, secret_access_key: x}]", "gateway.routes[0].s3.endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(fmt.Sprintf(route, tt.endpoint, tt.key, tt.secret, tt.clients)))
			errs, ok := err.(Errors)
			if !ok {
				t.Fatalf("err = %v; want validation errors", err)
			}
			for _, e := range errs {
				if e.Field == tt.field {
					return
				}
			}
			t.Fatalf("errors %v; want one for %s", errs, tt.field)
		})
	}
}

// routesYAML is a gateway with the given routes (YAML list items).
func routesYAML(routes ...string) string {
	var b strings.Builder
	b.WriteString("gateway:\n  routes:\n")
	for _, r := range routes {
		b.WriteString("    - " + r + "\n")
	}
	return b.String()
}

// route is one route; match is the inside of its match mapping.
func route(name, match, extra string) string {
	return fmt.Sprintf(`{name: %s, match: {%s}, upstream: {url: "http://u"}, resource: "{path}"%s}`, name, match, extra)
}

func TestWarnings(t *testing.T) {
	ci := ", case_insensitive: true"
	tests := []struct {
		name, yaml string
		want       []string // "field: substring", in order
	}{
		{"upper-case variant after a case-insensitive route", routesYAML(route("docs", "path_prefix: /docs/", ci), route("shouting", "path_prefix: /DOCS/", "")),
			[]string{`t.yaml:4: gateway.routes[1].match.path_prefix: "/DOCS/" also covers case variants of "/docs/"`}},
		{"catch-all after a case-insensitive route", routesYAML(route("docs", "path_prefix: /docs/", ci), route("all", "path_prefix: /", "")),
			[]string{`gateway.routes[1].match.path_prefix: "/" also covers case variants of "/docs/" (e.g. "/DOCS/"), the prefix of case-insensitive route "docs"`}},
		{"mixed case under the prefix", routesYAML(route("docs", "path_prefix: /docs/", ci), route("a", "path_prefix: /Docs/a/", "")),
			[]string{"gateway.routes[1].match.path_prefix"}},
		{"catch-all that folds the same way", routesYAML(route("docs", "path_prefix: /docs/", ci), route("all", "path_prefix: /", ci)), nil},
		{"unrelated prefix", routesYAML(route("docs", "path_prefix: /docs/", ci), route("api", "path_prefix: /api/", "")), nil},
		{"case-sensitive routes", routesYAML(route("docs", "path_prefix: /docs/", ""), route("shouting", "path_prefix: /DOCS/", "")), nil},
		{"shadowed route", routesYAML(route("docs", "path_prefix: /docs/", ci), route("sub", "path_prefix: /docs/sub/", "")),
			[]string{`t.yaml:4: gateway.routes[1]: never matches: route "docs" before it takes every request`}},
		{"shadowed by a catch-all", routesYAML(route("all", "path_prefix: /", ""), route("api", "path_prefix: /api/", "")),
			[]string{`gateway.routes[1]: never matches: route "all"`}},
		{"narrower methods first", routesYAML(route("reads", "path_prefix: /, methods: [GET]", ""), route("all", "path_prefix: /", "")), nil},
		{"other hosts", routesYAML(route("a", "host: a.example, path_prefix: /docs/", ci), route("b", "host: b.example, path_prefix: /DOCS/", "")), nil},
		// A matched write method that fenced_methods leaves out is forwarded
		// unchecked: legal (fenced_methods narrows), but said aloud.
		{"matched writes all unfenced", routesYAML(route("o", "path_prefix: /o/, methods: [PUT, POST]", ", fenced_methods: [DELETE]")),
			[]string{"gateway.routes[0].match.methods[0]: PUT matches this route but is not in fenced_methods",
				"gateway.routes[0].match.methods[1]: POST matches this route but is not in fenced_methods"}},
		{"one matched write unfenced", routesYAML(route("o", "path_prefix: /o/, methods: [GET, PUT, DELETE]", ", fenced_methods: [PUT]")),
			[]string{"gateway.routes[0].match.methods[2]: DELETE matches this route but is not in fenced_methods"}},
		{"matched writes all fenced", routesYAML(route("o", "path_prefix: /o/, methods: [GET, PUT]", ", fenced_methods: [PUT]")), nil},
		{"default fenced methods", routesYAML(route("o", "path_prefix: /o/, methods: [PUT, POST]", "")), nil},
		// Trees off on a route keyed by the path (issue 43): legal, said aloud.
		{"hierarchical false on a path route", routesYAML(route("dav", "path_prefix: /dav/", ", hierarchical: false")),
			[]string{"gateway.routes[0].hierarchical: false on a route keyed by the path: a DELETE or MOVE of a collection is not checked"}},
		{"hierarchical false on a header key", routesYAML(`{name: h, match: {path_prefix: /h/}, upstream: {url: "http://u"}, resource: "{header.X-Tenant}", hierarchical: false}`), nil},
		// A password to etcd over plain HTTP off loopback travels in clear.
		{"etcd password over plain HTTP", routesYAML(route("o", "path_prefix: /o/", `, token_source: {etcd: {endpoints: ["http://127.0.0.1:2379", "http://etcd-2:2379"], prefix: /l, username: gw, password: pw}}`)),
			[]string{"gateway.routes[0].token_source.etcd: the password goes to http://etcd-2:2379 in clear"}},
		{"etcd password on loopback", routesYAML(route("o", "path_prefix: /o/", `, token_source: {etcd: {endpoints: ["http://localhost:2379"], prefix: /l, username: gw, password: pw}}`)), nil},
		{"etcd over TLS with a password", routesYAML(route("o", "path_prefix: /o/", `, token_source: {etcd: {endpoints: ["https://etcd-2:2379"], prefix: /l, username: gw, password: pw, tls: {ca_file: /ca.pem}}}`)), nil},
		{"etcd without a password", routesYAML(route("o", "path_prefix: /o/", `, token_source: {etcd: {endpoints: ["http://etcd-2:2379"], prefix: /l}}`)), nil},
		{"user info in the upstream URL", routesYAML(`{name: o, match: {path_prefix: /o/}, upstream: {url: "http://svc:s3cr3t@u"}, resource: "{path}"}`),
			[]string{"gateway.routes[0].upstream.url: user info in the URL is not sent upstream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("t.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			ws := cfg.Warnings()
			if len(ws) != len(tt.want) {
				t.Fatalf("warnings %v; want %d", ws, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(ws[i].Error(), w) {
					t.Errorf("warning %q does not contain %q", ws[i], w)
				}
			}
		})
	}

	t.Setenv("FG_TEST_EMPTY", "")
	cfg, err := Parse("t.yaml", []byte(strings.Replace(good, "timeout: 5s}", `timeout: 5s, headers: {Authorization: "Bearer ${FG_TEST_EMPTY}"}}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if ws := cfg.Warnings(); len(ws) != 1 || ws[0].Error() != `t.yaml:7: gateway.routes[0].upstream.headers.Authorization: ${FG_TEST_EMPTY} is set but empty (in Bearer ${FG_TEST_EMPTY})` {
		t.Fatalf("empty variable: %v", ws)
	}
}

func TestKeyChanges(t *testing.T) {
	orders := route("orders", "path_prefix: /orders/", "")
	all := route("all", "path_prefix: /", "")
	tests := []struct {
		name      string
		old, next string
		want      []string // KeyChange strings, substrings
		confirmed bool
	}{
		{"nothing", routesYAML(orders, all), routesYAML(orders, all), nil, false},
		{"unrelated setting", routesYAML(orders), routesYAML(route("orders", "path_prefix: /orders/", ", max_body_bytes: 10")), nil, false},
		{"route appended", routesYAML(orders), routesYAML(orders, all), nil, false},
		{"non-overlapping route inserted", routesYAML(orders), routesYAML(route("api", "path_prefix: /api/", ""), orders), nil, false},
		{"case_insensitive", routesYAML(orders), routesYAML(route("orders", "path_prefix: /orders/", ", case_insensitive: true")),
			[]string{`route "orders": gateway.routes[0].case_insensitive: false -> true`}, false},
		{"resource", routesYAML(orders), routesYAML(`{name: orders, match: {path_prefix: /orders/}, upstream: {url: "http://u"}, resource: "{path.2}"}`),
			[]string{`gateway.routes[0].resource: "{path}" -> "{path.2}"`}, false},
		{"prefix", routesYAML(orders), routesYAML(route("orders", "path_prefix: /order/", "")),
			[]string{`gateway.routes[0].match.path_prefix: "/orders/" -> "/order/"`}, false},
		{"host", routesYAML(orders), routesYAML(route("orders", "host: api.example, path_prefix: /orders/", "")),
			[]string{`gateway.routes[0].match.host: "" -> "api.example"`}, false},
		{"methods", routesYAML(orders), routesYAML(route("orders", "path_prefix: /orders/, methods: [PUT]", "")),
			[]string{`gateway.routes[0].match.methods`}, false},
		{"overlapping route inserted in front", routesYAML(all), routesYAML(orders, all),
			[]string{`route "all": gateway.routes[1]: the routes in front of it that can take its requests changed from none to "orders"`}, false},
		{"route in front removed", routesYAML(orders, all), routesYAML(all),
			[]string{`route "all": gateway.routes[0]: the routes in front of it that can take its requests changed from "orders" to none`}, false},
		{"reordered", routesYAML(orders, all), routesYAML(all, orders),
			[]string{`route "all": gateway.routes[0]: the routes in front of it`, `route "orders": gateway.routes[1]: the routes in front of it`}, false},
		{"confirmed by key_version", routesYAML(orders), routesYAML(route("orders", "path_prefix: /orders/", ", case_insensitive: true, key_version: 1")),
			[]string{`gateway.routes[0].case_insensitive`}, true},
		{"token header needs a restart", routesYAML(orders), "gateway:\n  token_header: X-Token\n" + strings.TrimPrefix(routesYAML(orders), "gateway:\n"),
			[]string{`gateway.token_header: "Fencing-Token" -> "X-Token": needs a restart`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, err := Parse("old.yaml", []byte(tt.old))
			if err != nil {
				t.Fatal(err)
			}
			next, err := Parse("new.yaml", []byte(tt.next))
			if err != nil {
				t.Fatal(err)
			}
			got := KeyChanges(old, next)
			if len(got) != len(tt.want) {
				t.Fatalf("changes %v; want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].String(), w) {
					t.Errorf("change %q does not contain %q", got[i], w)
				}
				if got[i].Confirmed != tt.confirmed {
					t.Errorf("change %q: confirmed %v; want %v", got[i], got[i].Confirmed, tt.confirmed)
				}
			}
		})
	}
}
