// Package deploy checks the deployment artifacts: the Kubernetes manifests
// and the compose file are decoded strictly (an unknown or misspelt field
// is an error) into schemas of the fields they use, cross-checked (probes,
// ports, selectors, mounts), and the fencegate configuration they carry is
// run through config.Parse; the probe and metrics paths are asked of a real
// admin listener. No container engine or cluster is needed (none exists
// where the tests run).
package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// decode reads file strictly into v, checking apiVersion and kind.
func decode(t *testing.T, file, apiVersion, kind string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	decodeBytes(t, file, b, apiVersion, kind, v)
}

// decodeBytes decodes one YAML document strictly into v, checking
// apiVersion and kind; name says where it came from.
func decodeBytes(t *testing.T, name string, b []byte, apiVersion, kind string, v any) {
	t.Helper()
	if err := yaml.UnmarshalWithOptions(b, v, yaml.Strict()); err != nil {
		t.Fatalf("%s: %v", name, yaml.FormatError(err, false, true))
	}
	var h struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	yaml.Unmarshal(b, &h)
	if h.APIVersion != apiVersion || h.Kind != kind {
		t.Fatalf("%s: %s %s; want %s %s", name, h.APIVersion, h.Kind, apiVersion, kind)
	}
}

func subset(sub, of map[string]string) bool {
	if len(sub) == 0 {
		return false
	}
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return true
}

// TestDockerfileAndUnit checks the few lines that make the image static and
// unprivileged and the unit hardened; building them needs a container
// engine and systemd, which the test machine does not have.
func TestDockerfileAndUnit(t *testing.T) {
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(df)
	froms := strings.Count(d, "\nFROM ") + map[bool]int{true: 1}[strings.HasPrefix(d, "FROM ")]
	for _, want := range []string{"CGO_ENABLED=0", "USER 65532", "distroless/static", "./cmd/fencegate",
		"ARG VERSION", "-X main.version=${VERSION}", "-X main.commit=${COMMIT}", `org.opencontainers.image.version="${VERSION}"`} {
		if !strings.Contains(d, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// The build context leaves out the repository metadata and caches (the
	// version comes from the build arguments).
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", ".cache"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
	if froms < 2 {
		t.Errorf("Dockerfile has %d stages; want a multi-stage build", froms)
	}
	unit, err := os.ReadFile("systemd/fencegate.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	for k, want := range map[string]string{
		"ExecStart": "/usr/local/bin/fencegate serve -c /etc/fencegate/fencegate.yaml", "ExecReload": "/bin/kill -HUP $MAINPID",
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
	} {
		if keys[k] != want {
			t.Errorf("unit %s=%q; want %q", k, keys[k], want)
		}
	}
}
