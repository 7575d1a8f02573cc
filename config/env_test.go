package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// envYAML has a reference in every kind of scalar: double-quoted and plain
// in a flow mapping, plain in a block mapping, single-quoted, and a block
// literal.
const envYAML = `# ${FG_TEST_IN_COMMENT} is never looked up
gateway:
  routes:
    - name: api
      match: {path_prefix: /api/}
      upstream:
        url: http://127.0.0.1:9000
        headers: {Authorization: "Bearer ${FG_TEST_V}", X-Plain: ${FG_TEST_V}}   # ${FG_TEST_IN_COMMENT}
      resource: "{path}"
      fenced_methods: [PUT, POST, DELETE]
    - name: objects
      match: {path_prefix: /s3/}
      s3:
        endpoint: http://127.0.0.1:7070
        access_key_id: gw
        secret_access_key: ${FG_TEST_V}
        clients: [{access_key_id: worker, secret_access_key: '${FG_TEST_V}'}]
      resource: "{bucket}/{key}"
telemetry:
  service_name: |
    ${FG_TEST_V}
`

// TestEnvValuesOnly: whatever the variable holds lands verbatim in the
// fields that reference it; nothing else of the parsed configuration
// changes (no header added, no fenced_methods replaced, nothing commented
// out).
func TestEnvValuesOnly(t *testing.T) {
	t.Setenv("FG_TEST_V", "benign")
	if _, err := Parse("env.yaml", []byte(envYAML)); err != nil {
		t.Fatal(err)
	}
	attacks := map[string]string{
		"quote adds a header":       `x", X-Injected: "1`,
		"brace closes the mapping":  `x}, fenced_methods: [GET], y: {`,
		"bracket ends the list":     `x]}, {access_key_id: evil, secret_access_key: k}]`,
		"comment hides the rest":    `x # fenced_methods: [GET]`,
		"newline adds a key":        "x\n      fenced_methods: [GET]\n      X-Injected: 1",
		"PEM block":                 "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n",
		"single quote":              `it's`,
		"yaml syntax alone":         `&a [*a]`,
		"reference in the value":    `${FG_TEST_UNSET_SECOND_ORDER}`,
		"leading and trailing room": "  spaced  ",
	}
	for name, v := range attacks {
		t.Run(name, func(t *testing.T) {
			t.Setenv("FG_TEST_V", v)
			got, err := Parse("env.yaml", []byte(envYAML))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			want := cloneViaParse(t)
			r := &want.Gateway.Routes[0]
			r.Upstream.Headers = map[string]string{"Authorization": "Bearer " + v, "X-Plain": v}
			s := want.Gateway.Routes[1].S3
			s.SecretAccessKey = v
			s.Clients[0].SecretAccessKey = v
			want.Telemetry.ServiceName = v + "\n"
			got.src, want.src = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("parsed config differs beyond the referenced fields:\ngot  %+v\nwant %+v\nroute0 %+v\nroute1 %+v", got.Gateway, want.Gateway, got.Gateway.Routes[0], got.Gateway.Routes[1].S3)
			}
		})
	}
}

// cloneViaParse parses envYAML with a benign value: the expected config
// before the referenced fields are set by hand.
func cloneViaParse(t *testing.T) *Config {
	t.Helper()
	old := os.Getenv("FG_TEST_V")
	os.Setenv("FG_TEST_V", "benign")
	defer os.Setenv("FG_TEST_V", old)
	c, err := Parse("env.yaml", []byte(envYAML))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEnvTypesAndEscapes(t *testing.T) {
	t.Setenv("FG_TEST_ON", "true")
	t.Setenv("FG_TEST_N", "4096")
	t.Setenv("FG_TEST_D", "250ms")
	t.Setenv("FG_TEST_NAME", "x")
	cfg, err := Parse("t.yaml", []byte(`
gateway:
  max_header_bytes: ${FG_TEST_N}
  idle_timeout: ${FG_TEST_D}
  routes:
    - name: r
      match: {path_prefix: /}
      upstream: {url: http://u, headers: {X-Price: "$$5 and $${FG_TEST_NAME} and $FG_TEST_NAME"}}
      resource: "{path}"
      case_insensitive: ${FG_TEST_ON}
      max_body_bytes: "${FG_TEST_N}"
`))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Gateway
	r := g.Routes[0]
	if g.MaxHeaderBytes != 4096 || g.IdleTimeout != 250*time.Millisecond || !r.CaseInsensitive || r.MaxBodyBytes != 4096 {
		t.Errorf("typed values: max_header_bytes %d idle_timeout %v case_insensitive %v max_body_bytes %d", g.MaxHeaderBytes, g.IdleTimeout, r.CaseInsensitive, r.MaxBodyBytes)
	}
	if got, want := r.Upstream.Headers["X-Price"], "$5 and ${FG_TEST_NAME} and $FG_TEST_NAME"; got != want {
		t.Errorf("escapes: %q; want %q", got, want)
	}
}

// TestEnvErrorsNameTheReference: errors point at file:line and name
// ${NAME}; none prints the value, whatever went wrong with it.
func TestEnvErrorsNameTheReference(t *testing.T) {
	const secret = "s3cr3t-Value-1234"
	t.Setenv("FG_TEST_SECRET", secret)
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unset", strings.Replace(good, "127.0.0.1:9000", "${FG_TEST_UNSET}", 1),
			[]string{"bad.yaml:7: gateway.routes[0].upstream.url: environment variable ${FG_TEST_UNSET} is not set"}},
		{"unset in a list", good + "tls: {mode: files, cert_file: a, key_file: b, listeners: [gateway, \"${FG_TEST_UNSET}\"]}\n",
			[]string{"bad.yaml:9: tls.listeners[1]: environment variable ${FG_TEST_UNSET} is not set"}},
		{"number field", strings.Replace(good, "  listen: 127.0.0.1:8080\n", "  listen: 127.0.0.1:8080\n  max_header_bytes: ${FG_TEST_SECRET}\n", 1),
			[]string{"bad.yaml:4: gateway.max_header_bytes: ${FG_TEST_SECRET} from the environment must be a whole number"}},
		{"duration field", strings.Replace(good, "timeout: 5s", "timeout: ${FG_TEST_SECRET}", 1),
			[]string{"bad.yaml:7: gateway.routes[0].upstream.timeout: ${FG_TEST_SECRET} from the environment is not a duration", "30s, 1m or 250ms"}},
		{"boolean field", good + "      case_insensitive: \"${FG_TEST_SECRET}\"\n",
			[]string{"bad.yaml:9: gateway.routes[0].case_insensitive: ${FG_TEST_SECRET} from the environment must be true or false"}},
		{"scalar where a mapping goes", strings.Replace(good, "{url: http://127.0.0.1:9000, timeout: 5s}", "${FG_TEST_SECRET}", 1),
			[]string{"bad.yaml:7:", "${FG_TEST_SECRET}"}},
		{"validation quotes the value", good + "fence: {mode: \"${FG_TEST_SECRET}\"}\n",
			[]string{"bad.yaml:9: fence.mode: must be local or shared, not ${FG_TEST_SECRET}"}},
		{"inside a longer value", strings.Replace(good, "http://127.0.0.1:9000", "ftp://app:${FG_TEST_SECRET}@db", 1),
			[]string{"gateway.routes[0].upstream.url", "ftp://app:${FG_TEST_SECRET}@db"}},
		{"excerpt of a neighbouring error", strings.Replace(good, "url: http://127.0.0.1:9000, ", "url: \"http://h/${FG_TEST_SECRET}\", bogus: 1, ", 1),
			[]string{"bad.yaml:7:", "bogus", "${FG_TEST_SECRET}"}},
		{"reference in a key", strings.Replace(good, "timeout: 5s}", "headers: {${FG_TEST_SECRET}: v}}", 1),
			[]string{"bad.yaml:7:", "${FG_TEST_SECRET}: environment variables are expanded in values, not in keys"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("the error prints the value:\n%v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestReadmeExampleValidates: the full example of docs/configuration.md,
// whose comments hold ${DATABASE_URL}, and the README's short one parse
// with nothing set.
func TestReadmeExampleValidates(t *testing.T) {
	for _, ex := range []struct{ file, heading string }{
		{"../docs/configuration.md", "\n## Configuration\n"},
		{"../README.md", "\n## Configuration\n"},
	} {
		b, err := os.ReadFile(ex.file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, ex.heading)
		if i < 0 {
			t.Fatalf("%s has no %q section", ex.file, strings.TrimSpace(ex.heading))
		}
		open := strings.Index(s[i:], "```yaml\n")
		if open < 0 {
			t.Fatalf("%s: no yaml example under %q", ex.file, strings.TrimSpace(ex.heading))
		}
		start := i + open + len("```yaml\n")
		end := strings.Index(s[start:], "```") + start
		os.Unsetenv("DATABASE_URL")
		if _, err := Parse(ex.file, []byte(s[start:end])); err != nil {
			t.Fatalf("%s example: %v", ex.file, err)
		}
	}
}

func TestDurationMessages(t *testing.T) {
	for in, want := range map[string]string{
		"5 parsecs": `bad.yaml:7: gateway.routes[0].upstream.timeout: "5 parsecs" is not a duration: write it such as 30s, 1m or 250ms`,
		"30":        `bad.yaml:7: gateway.routes[0].upstream.timeout: needs a unit: write a duration such as 30s, 1m or 250ms`,
	} {
		_, err := Parse("bad.yaml", []byte(strings.Replace(good, "timeout: 5s", "timeout: "+in, 1)))
		if err == nil || err.Error() != want {
			t.Errorf("timeout %q: %v; want %s", in, err, want)
		}
	}
}
