package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
	"github.com/goccy/go-yaml"
)

// Strict schemas: the subset of the Kubernetes API (field names as in
// k8s.io/api) these manifests use. A field the manifests or the chart render
// that is not here fails the decoding: add it here, as k8s.io/api spells it.

type meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type Head struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
}

type selector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type configMap struct {
	Head `yaml:",inline"`
	Data map[string]string `yaml:"data"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds       int `yaml:"periodSeconds"`
	FailureThreshold    int `yaml:"failureThreshold"`
	InitialDelaySeconds int `yaml:"initialDelaySeconds"`
}

type secretKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *secretKeyRef `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type securityContext struct {
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Args            []string `yaml:"args"`
	Ports           []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env          []envVar `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	Lifecycle *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext securityContext `yaml:"securityContext"`
}

type podSecurityContext struct {
	RunAsNonRoot   bool `yaml:"runAsNonRoot"`
	RunAsUser      int  `yaml:"runAsUser"`
	RunAsGroup     int  `yaml:"runAsGroup"`
	FSGroup        int  `yaml:"fsGroup"`
	SeccompProfile struct {
		Type string `yaml:"type"`
	} `yaml:"seccompProfile"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int                `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string             `yaml:"restartPolicy"`
	SecurityContext               podSecurityContext `yaml:"securityContext"`
	TopologySpreadConstraints     []struct {
		MaxSkew           int      `yaml:"maxSkew"`
		TopologyKey       string   `yaml:"topologyKey"`
		WhenUnsatisfiable string   `yaml:"whenUnsatisfiable"`
		LabelSelector     selector `yaml:"labelSelector"`
	} `yaml:"topologySpreadConstraints"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
		Secret *struct {
			SecretName  string `yaml:"secretName"`
			DefaultMode int    `yaml:"defaultMode"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type deployment struct {
	Head `yaml:",inline"`
	Spec struct {
		Replicas int      `yaml:"replicas"`
		Selector selector `yaml:"selector"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate *struct {
				MaxUnavailable int `yaml:"maxUnavailable"`
				MaxSurge       int `yaml:"maxSurge"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type job struct {
	Head `yaml:",inline"`
	Spec struct {
		BackoffLimit            int `yaml:"backoffLimit"`
		TTLSecondsAfterFinished int `yaml:"ttlSecondsAfterFinished"`
		Template                struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type service struct {
	Head `yaml:",inline"`
	Spec struct {
		Type     string            `yaml:"type"`
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type pdb struct {
	Head `yaml:",inline"`
	Spec struct {
		MinAvailable   *int     `yaml:"minAvailable"`
		MaxUnavailable *int     `yaml:"maxUnavailable"`
		Selector       selector `yaml:"selector"`
	} `yaml:"spec"`
}

type networkPolicy struct {
	Head `yaml:",inline"`
	Spec struct {
		PodSelector selector `yaml:"podSelector"`
		PolicyTypes []string `yaml:"policyTypes"`
		Ingress     []struct {
			From []struct {
				NamespaceSelector *selector `yaml:"namespaceSelector"`
				PodSelector       *selector `yaml:"podSelector"`
			} `yaml:"from"`
			Ports []struct {
				Port     string `yaml:"port"`
				Protocol string `yaml:"protocol"`
			} `yaml:"ports"`
		} `yaml:"ingress"`
	} `yaml:"spec"`
}

type pvc struct {
	Head `yaml:",inline"`
	Spec struct {
		AccessModes      []string `yaml:"accessModes"`
		StorageClassName string   `yaml:"storageClassName"`
		Resources        struct {
			Requests map[string]string `yaml:"requests"`
		} `yaml:"resources"`
	} `yaml:"spec"`
}

type serviceMonitor struct {
	Head `yaml:",inline"`
	Spec struct {
		Selector  selector `yaml:"selector"`
		Endpoints []struct {
			Port     string `yaml:"port"`
			Path     string `yaml:"path"`
			Interval string `yaml:"interval"`
			// Authorization is the scrape's bearer key (admin.auth is on).
			Authorization *struct {
				Type        string       `yaml:"type"`
				Credentials secretKeyRef `yaml:"credentials"`
			} `yaml:"authorization"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type kustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Namespace  string   `yaml:"namespace"`
	Resources  []string `yaml:"resources"`
}

// objects is one deployment's set of Kubernetes objects, from the kustomize
// directory or from the chart's rendering. A pointer is nil when the set
// has no such object.
type objects struct {
	cm      *configMap
	dep     *deployment
	svc     *service
	budget  *pdb
	netpol  *networkPolicy
	migrate *job
	data    *pvc
	sm      *serviceMonitor
}

// add decodes one document strictly by its kind.
func (o *objects) add(t *testing.T, name string, b []byte) {
	t.Helper()
	var h Head
	if err := yaml.Unmarshal(b, &h); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	kinds := map[string]struct {
		api string
		v   any
	}{
		"ConfigMap":             {"v1", &o.cm},
		"Deployment":            {"apps/v1", &o.dep},
		"Service":               {"v1", &o.svc},
		"PodDisruptionBudget":   {"policy/v1", &o.budget},
		"NetworkPolicy":         {"networking.k8s.io/v1", &o.netpol},
		"Job":                   {"batch/v1", &o.migrate},
		"PersistentVolumeClaim": {"v1", &o.data},
		"ServiceMonitor":        {"monitoring.coreos.com/v1", &o.sm},
	}
	k, ok := kinds[h.Kind]
	if !ok {
		t.Fatalf("%s: kind %q is not one the tests know (add its schema)", name, h.Kind)
	}
	// k.v is a **T: allocate the T, decode into it, refuse a second one.
	pv := reflect.ValueOf(k.v).Elem()
	if !pv.IsNil() {
		t.Fatalf("%s: a second %s", name, h.Kind)
	}
	pv.Set(reflect.New(pv.Type().Elem()))
	decodeBytes(t, name, b, k.api, h.Kind, pv.Interface())
}

// secretRefs lists, per Secret name, the keys the objects read.
func (o *objects) secretRefs() map[string][]string {
	refs := map[string][]string{}
	addRef := func(r *secretKeyRef) {
		if !slices.Contains(refs[r.Name], r.Key) {
			refs[r.Name] = append(refs[r.Name], r.Key)
		}
	}
	var pods []podSpec
	if o.dep != nil {
		pods = append(pods, o.dep.Spec.Template.Spec)
	}
	if o.migrate != nil {
		pods = append(pods, o.migrate.Spec.Template.Spec)
	}
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					addRef(e.ValueFrom.SecretKeyRef)
				}
			}
		}
	}
	if o.sm != nil {
		for _, e := range o.sm.Spec.Endpoints {
			if e.Authorization != nil {
				addRef(&e.Authorization.Credentials)
			}
		}
	}
	for _, keys := range refs {
		slices.Sort(keys)
	}
	return refs
}

func TestKubernetes(t *testing.T) {
	dir := "kubernetes"
	var k kustomization
	decode(t, filepath.Join(dir, "kustomization.yaml"), "kustomize.config.k8s.io/v1beta1", "Kustomization", &k)
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			t.Errorf("%s is not listed in kustomization.yaml", f)
		}
	}
	if k.Namespace == "" {
		t.Error("kustomization.yaml sets no namespace: the objects would land in whatever namespace kubectl points at")
	}
	var o objects
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		o.add(t, filepath.Join(dir, r), b)
	}
	checkObjects(t, &o, true)
	if o.dep.Spec.Replicas != 3 {
		t.Errorf("replicas = %d; want 3", o.dep.Spec.Replicas)
	}
	checkDocSecrets(t, "Kubernetes", k.Namespace, o.secretRefs())
}

// releaseTag is the image tag the manifests must run: v + the chart's
// appVersion, the release these files document.
func releaseTag(t *testing.T) string {
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	b, err := os.ReadFile("helm/fencegate/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("helm/fencegate/Chart.yaml: appVersion %q, %v", chart.AppVersion, err)
	}
	return "v" + chart.AppVersion
}

// quantityMiB reads a memory quantity in Ki, Mi or Gi as MiB.
func quantityMiB(t *testing.T, q string) int {
	for unit, f := range map[string]float64{"Ki": 1.0 / 1024, "Mi": 1, "Gi": 1024} {
		if n, ok := strings.CutSuffix(q, unit); ok {
			v, err := strconv.Atoi(n)
			if err == nil {
				return int(float64(v) * f)
			}
		}
	}
	t.Fatalf("memory quantity %q: want Ki, Mi or Gi", q)
	return 0
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// checkObjects checks one deployment's objects against each other, against
// a real admin listener and against fencegate's own validation. shared
// says whether the replicas fence through PostgreSQL.
func checkObjects(t *testing.T, o *objects, shared bool) {
	t.Helper()
	if o.cm == nil || o.dep == nil || o.svc == nil {
		t.Fatalf("want a ConfigMap, a Deployment and a Service; got %+v", o)
	}
	s := o.dep.Spec
	pod := s.Template
	if !subset(s.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", s.Selector.MatchLabels, pod.Metadata.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	checkPodSecurity(t, "Deployment", pod.Spec)

	// The environment the container gets, with made-up secret values:
	// sha256 keys are the hashes of "plain-<key>".
	env := map[string]string{}
	plain := map[string]string{} // SHA-256 -> key
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			key := e.ValueFrom.SecretKeyRef.Key
			switch {
			case strings.HasSuffix(key, "-sha256"):
				env[e.Name] = auth.HashKey("plain-" + key)
				plain[env[e.Name]] = "plain-" + key
			case strings.Contains(key, "database-url"):
				env[e.Name] = "postgres://fencegate@db:5432/fencegate"
			default:
				env[e.Name] = "secret-" + key
			}
		case e.ValueFrom != nil:
			t.Errorf("env %s: valueFrom without secretKeyRef", e.Name)
		default:
			env[e.Name] = e.Value
			if strings.Contains(strings.ToLower(e.Name), "token") || strings.Contains(e.Name, "DATABASE") || strings.Contains(e.Name, "KEY") {
				t.Errorf("env %s must come from a Secret", e.Name)
			}
		}
	}

	// The configuration: every ${NAME} it expands is set by the container,
	// config.Parse accepts it, and so does `fencegate validate`.
	raw, ok := o.cm.Data["fencegate.yaml"]
	if !ok {
		t.Fatal("ConfigMap has no fencegate.yaml")
	}
	for _, m := range envRef.FindAllStringSubmatch(raw, -1) {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("the config expands ${%s} but the container does not set it", m[1])
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.Parse("fencegate.yaml", []byte(raw))
	if err != nil {
		t.Fatalf("ConfigMap config: %v", err)
	}
	cfgFile := filepath.Join(t.TempDir(), "fencegate.yaml")
	if err := os.WriteFile(cfgFile, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	validate := exec.Command(testenv.BuildBinary(t, "github.com/fencegate/fencegate/cmd/fencegate"), "validate", "-c", cfgFile)
	if out, err := validate.CombinedOutput(); err != nil {
		t.Errorf("fencegate validate -c (the ConfigMap's fencegate.yaml): %v\n%s", err, out)
	}
	if shared {
		if st := stores(cfg.Store); cfg.Fence.Mode != "shared" || len(st) != 1 || (st[0] != "postgres" && st[0] != "etcd") {
			t.Errorf("fence.mode %q with stores %v; replicas must share the fence (mode shared, store postgres or etcd)", cfg.Fence.Mode, st)
		}
		if s.Strategy.Type != "RollingUpdate" {
			t.Errorf("strategy %q; shared replicas roll", s.Strategy.Type)
		}
	} else {
		if cfg.Fence.Mode != "local" || cfg.Store.Embedded == nil {
			t.Fatalf("local: fence.mode %q, embedded store %v", cfg.Fence.Mode, cfg.Store.Embedded != nil)
		}
		// One process holds the store's file: one replica, the old pod
		// gone before the new one starts, the file on the claimed volume.
		if s.Replicas != 1 || s.Strategy.Type != "Recreate" {
			t.Errorf("local: replicas %d, strategy %q; want 1, Recreate", s.Replicas, s.Strategy.Type)
		}
		onVolume := false
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.PersistentVolumeClaim != nil && o.data != nil && v.PersistentVolumeClaim.ClaimName == o.data.Metadata.Name &&
					strings.HasPrefix(cfg.Store.Embedded.Path, m.MountPath+"/") && !m.ReadOnly {
					onVolume = true
				}
			}
		}
		if !onVolume {
			t.Errorf("local: store.embedded.path %s is not on a writable mount of the PersistentVolumeClaim", cfg.Store.Embedded.Path)
		}
	}

	if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("container must drop all capabilities, forbid privilege escalation and have a read-only root")
	}

	// The image is a release, the one these files document.
	if _, tag, _ := strings.Cut(c.Image, ":"); tag != releaseTag(t) {
		t.Errorf("image %s; want the tag %s (never latest: a restart must not change what runs)", c.Image, releaseTag(t))
	}

	// Stopping: preStop keeps the pod serving while it leaves the
	// endpoints, then SIGTERM drains for gateway.shutdown_timeout; the
	// grace period covers both.
	preStop := 0
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if preStop < 3 {
		t.Errorf("preStop sleep %ds; want a few seconds for the endpoints to drop the pod", preStop)
	}
	if need := preStop + int(cfg.Gateway.ShutdownTimeout.Seconds()) + 5; pod.Spec.TerminationGracePeriodSeconds < need {
		t.Errorf("terminationGracePeriodSeconds %d < preStop %ds + shutdown_timeout %s + 5s", pod.Spec.TerminationGracePeriodSeconds, preStop, cfg.Gateway.ShutdownTimeout)
	}

	// GOMEMLIMIT: 90% of the memory limit.
	limit := quantityMiB(t, c.Resources.Limits["memory"])
	if got, want := env["GOMEMLIMIT"], fmt.Sprintf("%dMiB", limit*90/100); got != want {
		t.Errorf("GOMEMLIMIT %q; want %q (90%% of limits.memory %s)", got, want, c.Resources.Limits["memory"])
	}

	// The config file the args name is the mounted ConfigMap key.
	cfgPath := ""
	for i, a := range c.Args {
		if a == "-c" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == o.cm.Metadata.Name && cfgPath == m.MountPath+"/fencegate.yaml" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("args -c %q is not the fencegate.yaml of the mounted ConfigMap %s", cfgPath, o.cm.Metadata.Name)
	}

	// Container ports are the listeners' ports.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	listeners := map[string]string{"gateway": cfg.Gateway.Listen, "admin": cfg.Admin.Listen}
	if cfg.Coordinator.Enabled {
		listeners["coordinator"] = cfg.Coordinator.Listen
	}
	for name, addr := range listeners {
		_, p, _ := net.SplitHostPort(addr)
		if strconv.Itoa(ports[name]) != p {
			t.Errorf("container port %s = %d; the config listens on %s", name, ports[name], addr)
		}
		if host, _, _ := net.SplitHostPort(addr); host == "127.0.0.1" {
			t.Errorf("%s listens on loopback (%s): unreachable from the Service and the kubelet", name, addr)
		}
	}

	// Probes: on the admin port, at paths a real admin listener answers.
	paths := map[string]string{}
	for what, p := range map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil {
			t.Errorf("no %s probe", what)
			continue
		}
		if p.HTTPGet.Port != "admin" {
			t.Errorf("%s probe on port %q; want the admin port", what, p.HTTPGet.Port)
		}
		paths[what] = p.HTTPGet.Path
	}
	if paths["liveness"] != "/healthz" || paths["readiness"] != "/readyz" {
		t.Errorf("probes %v; want liveness /healthz, readiness /readyz", paths)
	}

	// Service, PodDisruptionBudget, NetworkPolicy and ServiceMonitor select
	// the pods.
	if !subset(o.svc.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("Service selector %v does not select the pods", o.svc.Spec.Selector)
	}
	svcPorts := map[string]bool{}
	for _, p := range o.svc.Spec.Ports {
		if _, ok := ports[p.TargetPort]; !ok {
			t.Errorf("Service port %s targets %q, not a container port", p.Name, p.TargetPort)
		}
		svcPorts[p.Name] = true
	}
	if shared {
		b := o.budget
		switch {
		case b == nil:
			t.Error("shared replicas without a PodDisruptionBudget")
		case !subset(b.Spec.Selector.MatchLabels, pod.Metadata.Labels):
			t.Errorf("PodDisruptionBudget selector %v does not select the pods", b.Spec.Selector.MatchLabels)
		case b.Spec.MinAvailable != nil && (*b.Spec.MinAvailable < 1 || *b.Spec.MinAvailable >= s.Replicas),
			b.Spec.MaxUnavailable != nil && (*b.Spec.MaxUnavailable < 1 || *b.Spec.MaxUnavailable >= s.Replicas),
			(b.Spec.MinAvailable == nil) == (b.Spec.MaxUnavailable == nil):
			t.Errorf("PodDisruptionBudget minAvailable %v maxUnavailable %v of %d replicas", b.Spec.MinAvailable, b.Spec.MaxUnavailable, s.Replicas)
		}
	} else if o.budget != nil {
		t.Error("local: a PodDisruptionBudget on one replica blocks every node drain")
	}
	if np := o.netpol; np == nil {
		t.Error("no NetworkPolicy")
	} else {
		if !subset(np.Spec.PodSelector.MatchLabels, pod.Metadata.Labels) {
			t.Errorf("NetworkPolicy selector %v does not select the pods", np.Spec.PodSelector.MatchLabels)
		}
		opened := map[string]bool{}
		for _, in := range np.Spec.Ingress {
			if len(in.From) == 0 {
				t.Error("NetworkPolicy rule without from: open to everyone")
			}
			for _, f := range in.From {
				if f.PodSelector == nil || len(f.PodSelector.MatchLabels) == 0 {
					t.Errorf("NetworkPolicy peer %+v admits every pod", f)
				}
			}
			for _, p := range in.Ports {
				if _, ok := ports[p.Port]; !ok {
					t.Errorf("NetworkPolicy opens port %q, not a container port", p.Port)
				}
				opened[p.Port] = true
			}
		}
		for name := range listeners {
			if !opened[name] {
				t.Errorf("NetworkPolicy opens no way to the %s port", name)
			}
		}
	}
	if sm := o.sm; sm != nil {
		if !subset(sm.Spec.Selector.MatchLabels, o.svc.Metadata.Labels) {
			t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", sm.Spec.Selector.MatchLabels, o.svc.Metadata.Labels)
		}
		for _, e := range sm.Spec.Endpoints {
			if !svcPorts[e.Port] || e.Port != "admin" {
				t.Errorf("ServiceMonitor scrapes port %q; want the Service's admin port", e.Port)
			}
			paths["metrics"] = e.Path
			if a := e.Authorization; a == nil || a.Type != "Bearer" || a.Credentials.Name == "" {
				t.Errorf("ServiceMonitor must send a bearer key: admin.auth is on")
			}
		}
	}
	if !cfg.Admin.Auth.Enabled() || (cfg.Coordinator.Enabled && !cfg.Coordinator.Auth.Enabled()) {
		t.Errorf("the shipped config must ask for credentials on the admin and coordinator APIs")
	}

	// The migration Job: shared on PostgreSQL only, the Deployment's image,
	// and the Deployment's DATABASE_URL (checkEtcdProfile: none on etcd).
	if shared && cfg.Store.Etcd == nil {
		j := o.migrate
		if j == nil {
			t.Fatal("shared: no migration Job")
		}
		checkPodSecurity(t, "migration Job", j.Spec.Template.Spec)
		if subset(s.Selector.MatchLabels, j.Spec.Template.Metadata.Labels) {
			t.Error("the Deployment's selector (and so the Service's) selects the migration Job's pod")
		}
		jc := j.Spec.Template.Spec.Containers
		if len(jc) != 1 || jc[0].Image != c.Image || !slices.Equal(jc[0].Args, []string{"migrate"}) {
			t.Fatalf("migration Job containers %+v; want one running `migrate` with image %s", jc, c.Image)
		}
		var dbRef, jobRef *secretKeyRef
		for _, e := range c.Env {
			if e.Name == "DATABASE_URL" && e.ValueFrom != nil {
				dbRef = e.ValueFrom.SecretKeyRef
			}
		}
		for _, e := range jc[0].Env {
			if e.Name == "DATABASE_URL" && e.ValueFrom != nil {
				jobRef = e.ValueFrom.SecretKeyRef
			}
		}
		if dbRef == nil || jobRef == nil || *dbRef != *jobRef {
			t.Errorf("migration Job DATABASE_URL %v; the Deployment's is %v", jobRef, dbRef)
		}
	} else if o.migrate != nil {
		t.Error("the embedded and etcd stores need no migration Job")
	}

	// Ask a real admin listener: the config with a local store and
	// loopback listeners (no PostgreSQL needed for these paths).
	local := *cfg
	local.Store = config.Store{Embedded: &config.Embedded{Path: filepath.Join(t.TempDir(), "fg.db")}}
	local.Fence.Mode = "local"
	gw := *cfg.Gateway
	gw.Listen = "127.0.0.1:0"
	local.Gateway = &gw
	local.Coordinator.Enabled = false
	local.Admin.Listen = "127.0.0.1:0"
	local.Telemetry.OTLPEndpoint = ""
	srv, err := server.New(context.Background(), &local, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	scrapeKey := ""
	for _, k := range cfg.Admin.Auth.APIKeys {
		if k.Owner == "prometheus" {
			scrapeKey = plain[k.SHA256]
		}
	}
	if paths["metrics"] != "" && scrapeKey == "" {
		t.Error("the ServiceMonitor scrapes, but admin.auth has no key of owner prometheus")
	}
	for what, p := range paths {
		for _, key := range []string{"", scrapeKey} {
			req, _ := http.NewRequest("GET", "http://"+srv.Addr("admin")+p, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusOK
			if what == "metrics" && key == "" {
				want = http.StatusUnauthorized // probes are open, the rest is not
			}
			if resp.StatusCode != want {
				t.Errorf("%s path %s (key %q) answers %s on the admin listener; want %d", what, p, key, resp.Status, want)
			}
		}
	}
}

func checkPodSecurity(t *testing.T, what string, p podSpec) {
	t.Helper()
	if !p.SecurityContext.RunAsNonRoot || p.SecurityContext.RunAsUser == 0 {
		t.Errorf("%s: pods must run as non-root", what)
	}
	for _, c := range p.Containers {
		if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s must drop all capabilities, forbid privilege escalation and have a read-only root", what, c.Name)
		}
	}
}

// checkDocSecrets checks that the commands docs/production.md gives under
// the bullet "- **<section>**" create, in namespace ns, exactly the Secrets
// and keys the objects read: a key the docs forget stops the pods
// (CreateContainerConfigError), one they add is a secret nobody reads.
func checkDocSecrets(t *testing.T, section, ns string, refs map[string][]string) {
	t.Helper()
	b, err := os.ReadFile("../docs/production.md")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "- **"+section+"**"):
			in = true
		case in && (strings.HasPrefix(line, "- **") || strings.HasPrefix(line, "#")):
			in = false
		case in && strings.HasPrefix(line, "    "):
			block = append(block, strings.TrimSpace(line))
		}
	}
	if len(block) == 0 {
		t.Fatalf("docs/production.md: no commands under - **%s**", section)
	}
	cmds := strings.Split(strings.ReplaceAll(strings.Join(block, "\n"), "\\\n", " "), "\n")
	created := map[string][]string{}
	nsCreated := false
	for _, cmd := range cmds {
		f := strings.Fields(cmd)
		if slices.Equal(f, []string{"kubectl", "create", "namespace", ns}) {
			nsCreated = true
		}
		i := slices.Index(f, "generic")
		if i < 0 || i+1 >= len(f) || !strings.Contains(cmd, "create secret generic") {
			continue
		}
		if !strings.Contains(cmd, "-n "+ns+" ") {
			t.Errorf("docs: %q does not create the Secret in namespace %s", cmd, ns)
		}
		name := f[i+1]
		for _, a := range f {
			for _, flag := range []string{"--from-literal=", "--from-file="} {
				if kv, ok := strings.CutPrefix(a, flag); ok {
					key, _, _ := strings.Cut(kv, "=")
					created[name] = append(created[name], key)
				}
			}
		}
		slices.Sort(created[name])
	}
	if !nsCreated {
		t.Errorf("docs (%s): no `kubectl create namespace %s` before the Secrets", section, ns)
	}
	if !reflect.DeepEqual(created, refs) {
		t.Errorf("docs/production.md (%s) creates the Secrets %v; the objects read %v", section, created, refs)
	}
}
