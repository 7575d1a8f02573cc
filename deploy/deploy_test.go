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
	"os/exec"
	"path/filepath"
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
	for _, want := range []string{"CGO_ENABLED=0", "USER 65532", "FROM scratch", "GOARCH=$TARGETARCH", "./cmd/fencegate",
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

// TestSystemdInstall runs the install commands of the unit's comment as
// written, into a scratch root, and checks that the service's made-up
// user (DynamicUser) can read the configuration and cannot read the
// secrets. A command naming an account that DynamicUser never creates
// (install -g fencegate) fails here as it fails on a real host.
func TestSystemdInstall(t *testing.T) {
	unit, err := os.ReadFile("systemd/fencegate.service")
	if err != nil {
		t.Fatal(err)
	}
	root, src := t.TempDir(), t.TempDir()
	var script []string
	for _, line := range strings.Split(string(unit), "\n") {
		cmd, ok := strings.CutPrefix(line, "#   install ")
		if !ok {
			continue
		}
		// Absolute destinations go under the scratch root.
		f := strings.Fields(cmd)
		f[len(f)-1] = root + f[len(f)-1]
		script = append(script, "install "+strings.Join(f, " "))
	}
	if len(script) < 3 {
		t.Fatalf("the unit's comment has %d install commands", len(script))
	}
	for name, mode := range map[string]os.FileMode{"fencegate": 0o755, "fencegate.yaml": 0o600, "env": 0o600} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "fencegate.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euc", strings.Join(script, "\n"))
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install commands of the unit's comment:\n%s\n%v\n%s", strings.Join(script, "\n"), err, out)
	}
	for path, want := range map[string]os.FileMode{
		"/usr/local/bin/fencegate":              0o755,
		"/etc/fencegate/fencegate.yaml":         0o644, // read by the dynamic user
		"/etc/fencegate/env":                    0o600, // read by systemd (root) only
		"/etc/systemd/system/fencegate.service": 0o644,
	} {
		fi, err := os.Stat(root + path)
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v; want %v", path, fi.Mode().Perm(), want)
		}
	}
	// The unit reads what was installed.
	keys := map[string]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	if keys["EnvironmentFile"] != "-/etc/fencegate/env" || !strings.Contains(keys["ExecStart"], "/etc/fencegate/fencegate.yaml") {
		t.Errorf("unit reads EnvironmentFile %q, ExecStart %q; want the installed files", keys["EnvironmentFile"], keys["ExecStart"])
	}
}
