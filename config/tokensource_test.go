package config

import (
	"strings"
	"testing"
)

// tokenRoutes is a gateway with the given routes, each "name prefix
// template source" where source is "-" (fencegate's coordinator), "etcd",
// "etcd2" (another cluster) or "zk".
func tokenRoutes(routes ...string) string {
	y := "gateway:\n  routes:\n"
	for _, r := range routes {
		f := strings.Fields(r)
		y += "    - name: " + f[0] + "\n      match: {path_prefix: " + f[1] + "}\n" +
			"      upstream: {url: \"http://127.0.0.1:9000\"}\n      resource: \"" + f[2] + "\"\n"
		switch f[3] {
		case "etcd":
			y += "      token_source: {etcd: {endpoints: [\"http://127.0.0.1:2379\"], prefix: /locks}}\n"
		case "etcd2":
			y += "      token_source: {etcd: {endpoints: [\"http://127.0.0.1:2479\"], prefix: /locks}}\n"
		case "zk":
			y += "      token_source: {zookeeper: {servers: [\"127.0.0.1:2181\"], path: /locks}}\n"
		}
	}
	return y
}

// etcdTLS is one etcd route whose token_source has the given endpoints
// (quoted inside a flow list) and extra fields.
func etcdTLS(endpoints, extra string) string {
	return strings.Replace(tokenRoutes("a /orders/ {path} etcd"), `endpoints: ["http://127.0.0.1:2379"], prefix: /locks`,
		`endpoints: ["`+endpoints+`"], prefix: /locks, `+extra, 1)
}

func TestTokenSource(t *testing.T) {
	for _, tt := range []struct {
		name   string
		yaml   string
		errHas string // "" means valid
	}{
		{"one etcd route", tokenRoutes("a /orders/ {path} etcd"), ""},
		{"mixed estate, disjoint prefixes", tokenRoutes("a /orders/ {path} etcd", "b /reports/ {path} -", "c /jobs/ jobs-{path.1} zk"), ""},
		{"two routes, one source", tokenRoutes("a /orders/ {path} etcd", "b /orders/eu/ {path} etcd"), ""},
		{"overlapping prefixes, two sources", tokenRoutes("a /orders/ {path} -", "b /orders/eu/ {path} etcd"), `route "b" (tokens from etcd /locks/) may produce the same resource keys as route "a"`},
		{"same template, two clusters", tokenRoutes("a /orders/ {path} etcd", "b /orders/ {path} etcd2"), "may produce the same resource keys"},
		{"template without literal start", tokenRoutes("a /orders/ {path} etcd", "b /x/ {header.Tenant} zk"), "may produce the same resource keys"},
		{"literal prefixes differ", tokenRoutes("a /orders/ o-{path.1} etcd", "b /x/ x-{path.1} zk"), ""},
		{"etcd without prefix", strings.Replace(tokenRoutes("a /orders/ {path} etcd"), "prefix: /locks", "prefix: locks", 1), "token_source.etcd.prefix"},
		{"etcd without endpoints", strings.Replace(tokenRoutes("a /orders/ {path} etcd"), `endpoints: ["http://127.0.0.1:2379"], `, "", 1), "token_source.etcd.endpoints"},
		{"zookeeper bad server", strings.Replace(tokenRoutes("a /orders/ {path} zk"), "127.0.0.1:2181", "localhost", 1), "token_source.zookeeper.servers[0]"},
		{"empty token_source", strings.Replace(tokenRoutes("a /orders/ {path} -"), "      resource:", "      token_source: {}\n      resource:", 1), "set etcd or zookeeper"},
		{"etcd over tls", etcdTLS(`https://127.0.0.1:2379`, `tls: {ca_file: /etc/etcd/ca.pem, cert_file: /etc/etcd/c.pem, key_file: /etc/etcd/c.key, server_name: etcd.internal}`), ""},
		{"etcd tls, one http endpoint", etcdTLS(`https://127.0.0.1:2379", "http://10.0.0.2:2379`, `tls: {ca_file: /etc/etcd/ca.pem}`), "endpoint http://10.0.0.2:2379 is not https://"},
		{"etcd https without tls", etcdTLS(`https://127.0.0.1:2379`, `username: u, password: p`), "token_source.etcd.tls: endpoint https://127.0.0.1:2379 is https://"},
		{"etcd tls cert without key", etcdTLS(`https://127.0.0.1:2379`, `tls: {cert_file: /etc/etcd/c.pem}`), "set cert_file and key_file together"},
		{"etcd password without user", etcdTLS(`http://127.0.0.1:2379`, `password: p`), "set username and password together"},
		{"etcd tls unknown field", etcdTLS(`https://127.0.0.1:2379`, `tls: {ca: /etc/etcd/ca.pem}`), "ca"},
		{"unknown field", strings.Replace(tokenRoutes("a /orders/ {path} etcd"), "prefix: /locks", "prefix: /locks, lease: 5", 1), "lease"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("ts.yaml", []byte(tt.yaml))
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("got %v; want valid", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("got %v; want an error containing %q", err, tt.errHas)
			}
		})
	}
}

func TestMayProduceKey(t *testing.T) {
	for _, tt := range []struct {
		r    Route
		key  string
		want bool
	}{
		{Route{Match: Match{PathPrefix: "/orders/"}, Resource: "{path}"}, "/orders/7", true},
		{Route{Match: Match{PathPrefix: "/orders/"}, Resource: "{path}"}, "/reports/7", false},
		{Route{Resource: "{path}"}, "/anything", true},
		{Route{Resource: "{bucket}/{key}"}, "b/k", true},
		{Route{Resource: "{bucket}/{key}"}, "/orders/7", false},
		{Route{Resource: "tenant-{header.T}"}, "tenant-a", true},
		{Route{Resource: "tenant-{header.T}"}, "Tenant-a", false},
		{Route{Resource: "tenant-{header.T}", CaseInsensitive: true}, "Tenant-a", true},
	} {
		if got := tt.r.MayProduceKey(tt.key); got != tt.want {
			t.Errorf("%q (prefix %q) MayProduceKey(%q) = %v; want %v", tt.r.Resource, tt.r.Match.PathPrefix, tt.key, got, tt.want)
		}
	}
}
