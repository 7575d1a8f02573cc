package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// helm runs the pinned helm offline, with its caches and configuration in
// a temporary directory (nothing from the user's ~/.config/helm).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(testenv.Helm(t), args...)
	home := t.TempDir()
	cmd.Env = append(cmd.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelmChart lints the chart and renders it for each profile; every
// rendered object is decoded strictly and checked as the kustomize
// manifests are (checkObjects), its configuration run through
// `fencegate validate`.
func TestHelmChart(t *testing.T) {
	const chart, ns = "helm/fencegate", "fencegate"
	for _, tc := range []struct {
		name   string
		values string // file under the chart; "" for values.yaml alone
		shared bool
		sm     bool // ServiceMonitor rendered
		docs   bool // docs/production.md's Helm commands are for this one
	}{
		{name: "default", shared: true},
		{name: "shared", values: "ci/shared-values.yaml", shared: true, sm: true, docs: true},
		{name: "local", values: "ci/local-values.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{chart}
			if tc.values != "" {
				args = append(args, "-f", filepath.Join(chart, tc.values))
			}
			if out, err := helm(t, append([]string{"lint", "--strict", "--namespace", ns}, args...)...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			out, err := helm(t, append([]string{"template", "fencegate", "--namespace", ns}, args...)...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			var o objects
			for i, doc := range strings.Split(out, "\n---\n") {
				if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
					continue
				}
				o.add(t, tc.name+" document "+string(rune('0'+i)), []byte(doc))
			}
			if (o.sm != nil) != tc.sm {
				t.Errorf("ServiceMonitor rendered: %v; want %v", o.sm != nil, tc.sm)
			}
			checkObjects(t, &o, tc.shared)
			if tc.shared {
				if o.dep.Spec.Replicas != 3 {
					t.Errorf("replicas %d; want replicaCount 3", o.dep.Spec.Replicas)
				}
				if hook := o.migrate.Metadata.Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
					t.Errorf("migration Job hook %q; want pre-install,pre-upgrade", hook)
				}
			}
			if tc.docs {
				checkDocSecrets(t, "Helm", ns, o.secretRefs())
			}
		})
	}

	// Values the chart refuses rather than render something that breaks.
	for _, set := range []string{"image.tag=latest", "profile=replicated", "resources.limits.memory=1G"} {
		if out, err := helm(t, "template", "fencegate", chart, "--set", set); err == nil {
			t.Errorf("helm template --set %s rendered; want an error", set)
		} else if !strings.Contains(out, strings.Split(set, "=")[0]) {
			t.Errorf("helm template --set %s: the error does not name the value:\n%s", set, out)
		}
	}
}
