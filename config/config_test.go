package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const good = `
gateway:
  listen: 127.0.0.1:8080
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: http://127.0.0.1:9000, timeout: 5s}
      resource: "{path}"
`

func TestParseGood(t *testing.T) {
	cfg, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Gateway.Routes[0]
	if r.Upstream.Timeout != 5*time.Second || r.DrainTimeout != 6*time.Second {
		t.Errorf("timeouts %v %v; want 5s and 6s", r.Upstream.Timeout, r.DrainTimeout)
	}
	if len(r.FencedMethods) != 0 {
		// Unset: the gateway fences every method but GET, HEAD, OPTIONS, TRACE.
		t.Errorf("fenced methods %v; want none (the default set)", r.FencedMethods)
	}
	if cfg.Store.Embedded == nil || cfg.Store.Embedded.Path != "./data/fencegate.db" || cfg.Fence.Mode != "local" {
		t.Errorf("store defaults %+v %+v", cfg.Store.Embedded, cfg.Fence)
	}
	if cfg.Gateway.TokenHeader != "Fencing-Token" || cfg.Admin.Listen != "127.0.0.1:9090" {
		t.Errorf("defaults %q %q", cfg.Gateway.TokenHeader, cfg.Admin.Listen)
	}
	if fp := cfg.Gateway.FastPath; fp == nil || *fp {
		t.Errorf("gateway.fast_path %v; want the default false", fp)
	}
}

// gateway.fast_path takes true or false, from the environment too; any
// other value is refused, never read as either.
func TestFastPath(t *testing.T) {
	yaml := strings.Replace(good, "  listen: 127.0.0.1:8080\n", "  listen: 127.0.0.1:8080\n  fast_path: ${FENCEGATE_TEST_FAST}\n", 1)
	for _, v := range []string{"false", "true"} {
		t.Setenv("FENCEGATE_TEST_FAST", v)
		cfg, err := Parse("fast.yaml", []byte(yaml))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := *cfg.Gateway.FastPath; got != (v == "true") {
			t.Errorf("fast_path %s read as %v", v, got)
		}
	}
	for _, v := range []string{"maybe", "", "0"} {
		t.Setenv("FENCEGATE_TEST_FAST", v)
		if _, err := Parse("fast.yaml", []byte(yaml)); err == nil || !strings.Contains(err.Error(), "fast_path") {
			t.Errorf("fast_path %q: error %v; want one naming the field", v, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown field", good + "    bogus: 1\n", []string{"bad.yaml:9:", "bogus"}},
		{"unknown top-level field", "gatway: {}\n", []string{"bad.yaml:1:", "gatway"}},
		{"bad duration", strings.Replace(good, "timeout: 5s", "timeout: 5 parsecs", 1), []string{"bad.yaml:7:"}},
		{"wrong type", strings.Replace(good, "listen: 127.0.0.1:8080", "listen: [a, b]", 1), []string{"bad.yaml:3:"}},
		{"syntax", "gateway:\n  routes: [\n", []string{"bad.yaml:"}},
		{"missing url", strings.Replace(good, "url: http://127.0.0.1:9000, ", "", 1),
			[]string{"bad.yaml:7: gateway.routes[0].upstream.url: required"}},
		{"bad template", strings.Replace(good, `"{path}"`, `"{paht}"`, 1),
			[]string{"bad.yaml:8: gateway.routes[0].resource: unknown variable {paht}"}},
		{"bad mode", good + "fence: {mode: distributed}\n", []string{"bad.yaml:9: fence.mode: must be local or shared"}},
		{"shared without postgres", good + "fence: {mode: shared}\n", []string{"fence.mode: shared needs store.postgres"}},
		{"relative upstream", strings.Replace(good, "http://127.0.0.1:9000", "127.0.0.1:9000", 1), []string{"upstream.url: must be an absolute"}},
		{"non-canonical prefix", strings.Replace(good, "/orders/", "/orders/../", 1), []string{"path_prefix"}},
		{"no routes", "gateway: {routes: []}\n", []string{"gateway.routes: at least one route"}},
		{"duplicate names", good + `    - name: orders
      match: {path_prefix: /x/}
      upstream: {url: http://127.0.0.1:9000}
      resource: "{path}"
`, []string{"gateway.routes[1].name: duplicate route name"}},
		{"two problems at once", strings.Replace(strings.Replace(good, `"{path}"`, `""`, 1), "http://127.0.0.1:9000", "ftp://x", 1),
			[]string{"routes[0].upstream.url", "routes[0].resource: required"}},
		{"precondition etag spanning paths", strings.Replace(good, `"{path}"`, `"{path.1}"`, 1) + "      precondition: etag\n",
			[]string{"precondition: etag on an upstream route needs a resource naming one object, with {path}"}},
		{"precondition bogus", good + "      precondition: mtime\n", []string{"precondition: must be etag or none"}},
		{"unset env", strings.Replace(good, "127.0.0.1:9000", "${FENCEGATE_TEST_UNSET_VAR}", 1),
			[]string{"bad.yaml:7: gateway.routes[0].upstream.url: environment variable ${FENCEGATE_TEST_UNSET_VAR} is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Setenv("FENCEGATE_TEST_UPSTREAM", "http://127.0.0.1:7777")
	cfg, err := Parse("env.yaml", []byte(strings.Replace(good, "http://127.0.0.1:9000", "${FENCEGATE_TEST_UPSTREAM}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Gateway.Routes[0].Upstream.URL; u != "http://127.0.0.1:7777" {
		t.Fatalf("url %q", u)
	}
}

// TestIdentityFileSpellings: store.identity_file is the name; the old
// store.marker still sets it, with a warning, and the two set to different
// files are an error. The default file name did not change.
func TestIdentityFileSpellings(t *testing.T) {
	parse := func(store string) (*Config, error) {
		return Parse("id.yaml", []byte(good+"store:\n  embedded: {path: /var/lib/fg.db}\n"+store))
	}
	cfg, err := parse("")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Store.IdentityFile; got != "/var/lib/fg.db.marker" {
		t.Errorf("default identity file %q", got)
	}
	if len(cfg.Warnings()) != 0 {
		t.Errorf("warnings without store.marker: %v", cfg.Warnings())
	}
	cfg, err = parse("  marker: /other/id\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Store.IdentityFile; got != "/other/id" {
		t.Errorf("store.marker set the identity file to %q", got)
	}
	if ws := fmt.Sprint(cfg.Warnings()); !strings.Contains(ws, "store.marker") || !strings.Contains(ws, "identity_file") {
		t.Errorf("store.marker: warnings %s; want one naming the new field", ws)
	}
	if _, err := parse("  marker: /a\n  identity_file: /b\n"); err == nil || !strings.Contains(err.Error(), "store.marker") {
		t.Errorf("both spellings, two files: %v; want an error naming store.marker", err)
	}
	if _, err := parse("  marker: /a\n  identity_file: /a\n"); err != nil {
		t.Errorf("both spellings, one file: %v", err)
	}
}
