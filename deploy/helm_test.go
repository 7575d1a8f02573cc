package deploy

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/fencegate/fencegate/config"
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
		etcd   bool // sharedStore etcd
	}{
		{name: "default", shared: true},
		{name: "shared", values: "ci/shared-values.yaml", shared: true, sm: true, docs: true},
		{name: "local", values: "ci/local-values.yaml"},
		{name: "shared-etcd", values: "ci/shared-etcd-values.yaml", shared: true, sm: true, etcd: true},
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
			if tc.etcd {
				checkEtcdProfile(t, &o)
			}
			checkObjects(t, &o, tc.shared)
			if tc.shared && !tc.etcd {
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
	for _, set := range []string{"image.tag=latest", "profile=replicated", "resources.limits.memory=1G", "sharedStore=mysql", "sharedStore=etcd,etcd.endpoints=null"} {
		if out, err := helm(t, "template", "fencegate", chart, "--set", set); err == nil {
			t.Errorf("helm template --set %s rendered; want an error", set)
		} else if name, _, _ := strings.Cut(set[strings.LastIndex(set, ",")+1:], "="); !strings.Contains(out, name) {
			t.Errorf("helm template --set %s: the error does not name the value:\n%s", set, out)
		}
	}
}

// checkEtcdProfile checks what the shared profile on etcd renders besides
// the configuration: no PostgreSQL (no DATABASE_URL, no migration Job),
// the etcd password from the Secret, and the TLS files the configuration
// names on a read-only mount of etcd.tlsSecret.
func checkEtcdProfile(t *testing.T, o *objects) {
	t.Helper()
	if o.migrate != nil {
		t.Error("a migration Job rendered for sharedStore etcd (it migrates PostgreSQL)")
	}
	var cfg struct {
		Store struct {
			Etcd *struct {
				Endpoints []string          `yaml:"endpoints"`
				Password  string            `yaml:"password"`
				TLS       map[string]string `yaml:"tls"`
			} `yaml:"etcd"`
			Postgres any `yaml:"postgres"`
		} `yaml:"store"`
		Fence struct {
			Mode string `yaml:"mode"`
		} `yaml:"fence"`
	}
	if err := yaml.Unmarshal([]byte(o.cm.Data["fencegate.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	e := cfg.Store.Etcd
	if e == nil || cfg.Store.Postgres != nil || cfg.Fence.Mode != "shared" || len(e.Endpoints) != 3 {
		t.Fatalf("store %+v, fence.mode %q; want store.etcd alone with the 3 endpoints, mode shared", cfg.Store, cfg.Fence.Mode)
	}
	c := o.dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, v := range c.Env {
		if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
			env[v.Name] = v.ValueFrom.SecretKeyRef.Key
		}
	}
	if _, ok := env["DATABASE_URL"]; ok {
		t.Error("DATABASE_URL set for sharedStore etcd")
	}
	if e.Password != "${ETCD_PASSWORD}" || env["ETCD_PASSWORD"] != "etcd-password" {
		t.Errorf("store.etcd.password %q, ETCD_PASSWORD from Secret key %q; want ${ETCD_PASSWORD} from etcd-password", e.Password, env["ETCD_PASSWORD"])
	}
	for _, k := range []string{"ca_file", "cert_file", "key_file"} {
		f, mounted := e.TLS[k], false
		for _, m := range c.VolumeMounts {
			for _, v := range o.dep.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "fencegate-etcd-client" && m.ReadOnly && strings.HasPrefix(f, m.MountPath+"/") {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("store.etcd.tls.%s %q is not on a read-only mount of the Secret fencegate-etcd-client", k, f)
		}
	}
}

// stores are the YAML names of the stores s configures, found by
// reflection so the check holds for stores added later (etcd).
func stores(s config.Store) []string {
	var names []string
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			names = append(names, name)
		}
	}
	return names
}
