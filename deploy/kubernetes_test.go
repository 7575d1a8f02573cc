package deploy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

// Strict schemas: the subset of the Kubernetes API (field names as in
// k8s.io/api) these manifests use.

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
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

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env          []envVar `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type deployment struct {
	Head `yaml:",inline"`
	Spec struct {
		Replicas int      `yaml:"replicas"`
		Selector selector `yaml:"selector"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable int `yaml:"maxUnavailable"`
				MaxSurge       int `yaml:"maxSurge"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot   bool `yaml:"runAsNonRoot"`
					RunAsUser      int  `yaml:"runAsUser"`
					RunAsGroup     int  `yaml:"runAsGroup"`
					SeccompProfile struct {
						Type string `yaml:"type"`
					} `yaml:"seccompProfile"`
				} `yaml:"securityContext"`
				TopologySpreadConstraints []struct {
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
				} `yaml:"volumes"`
			} `yaml:"spec"`
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
		MinAvailable   int      `yaml:"minAvailable"`
		MaxUnavailable int      `yaml:"maxUnavailable"`
		Selector       selector `yaml:"selector"`
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
				Type        string `yaml:"type"`
				Credentials struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"credentials"`
			} `yaml:"authorization"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type kustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
}

// kubeEnv is what the Secret provides in the cluster.
var kubeEnv = map[string]string{
	"DATABASE_URL":          "postgres://fencegate@db:5432/fencegate",
	"BILLING_TOKEN":         "t",
	"INVOICER_KEY_SHA256":   auth.HashKey("k"),
	"WORKER_KEY_SHA256":     auth.HashKey("w"),
	"OPERATOR_KEY_SHA256":   auth.HashKey("o"),
	"PROMETHEUS_KEY_SHA256": auth.HashKey("p"),
	"OTLP_ENDPOINT":         "http://collector:4318",
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

	var cm configMap
	var dep deployment
	var svc service
	var budget pdb
	var sm serviceMonitor
	decode(t, filepath.Join(dir, "configmap.yaml"), "v1", "ConfigMap", &cm)
	decode(t, filepath.Join(dir, "deployment.yaml"), "apps/v1", "Deployment", &dep)
	decode(t, filepath.Join(dir, "service.yaml"), "v1", "Service", &svc)
	decode(t, filepath.Join(dir, "pdb.yaml"), "policy/v1", "PodDisruptionBudget", &budget)
	decode(t, filepath.Join(dir, "servicemonitor.yaml"), "monitoring.coreos.com/v1", "ServiceMonitor", &sm)

	// The configuration is valid fencegate config, in shared mode.
	for k, v := range kubeEnv {
		t.Setenv(k, v)
	}
	raw, ok := cm.Data["fencegate.yaml"]
	if !ok {
		t.Fatal("ConfigMap has no fencegate.yaml")
	}
	cfg, err := config.Parse("configmap.yaml:fencegate.yaml", []byte(raw))
	if err != nil {
		t.Fatalf("ConfigMap config: %v", err)
	}
	if cfg.Fence.Mode != "shared" || cfg.Store.Postgres == nil {
		t.Errorf("fence.mode %q with postgres=%v; replicas must share the fence (mode shared, store postgres)", cfg.Fence.Mode, cfg.Store.Postgres != nil)
	}

	s := dep.Spec
	if s.Replicas != 3 {
		t.Errorf("replicas = %d; want 3", s.Replicas)
	}
	pod := s.Template
	if !subset(s.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", s.Selector.MatchLabels, pod.Metadata.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if !pod.Spec.SecurityContext.RunAsNonRoot || pod.Spec.SecurityContext.RunAsUser == 0 {
		t.Error("pods must run as non-root")
	}
	if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("container must drop all capabilities, forbid privilege escalation and have a read-only root")
	}
	for _, e := range c.Env {
		if strings.Contains(strings.ToLower(e.Name), "token") || strings.Contains(e.Name, "DATABASE") {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("env %s must come from a Secret", e.Name)
			}
		}
	}
	for k := range kubeEnv {
		if !slices.ContainsFunc(c.Env, func(e envVar) bool { return e.Name == k }) {
			t.Errorf("the config expands ${%s} but the container does not set it", k)
		}
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
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name && cfgPath == m.MountPath+"/fencegate.yaml" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("args -c %q is not the fencegate.yaml of the mounted ConfigMap %s", cfgPath, cm.Metadata.Name)
	}

	// Container ports are the listeners' ports.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, addr := range map[string]string{"gateway": cfg.Gateway.Listen, "coordinator": cfg.Coordinator.Listen, "admin": cfg.Admin.Listen} {
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

	// Service, PodDisruptionBudget and ServiceMonitor select the pods.
	if !subset(svc.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("Service selector %v does not select the pods", svc.Spec.Selector)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort]; !ok {
			t.Errorf("Service port %s targets %q, not a container port", p.Name, p.TargetPort)
		}
		svcPorts[p.Name] = true
	}
	if !subset(budget.Spec.Selector.MatchLabels, pod.Metadata.Labels) || budget.Spec.MinAvailable < 1 || budget.Spec.MinAvailable >= s.Replicas {
		t.Errorf("PodDisruptionBudget: selector %v, minAvailable %d of %d replicas", budget.Spec.Selector.MatchLabels, budget.Spec.MinAvailable, s.Replicas)
	}
	if !subset(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", sm.Spec.Selector.MatchLabels, svc.Metadata.Labels)
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
	if !cfg.Admin.Auth.Enabled() || !cfg.Coordinator.Auth.Enabled() {
		t.Errorf("the shipped config must ask for credentials on the admin and coordinator APIs")
	}

	// Ask a real admin listener: the ConfigMap's config with a local store
	// and loopback listeners (no PostgreSQL needed for these paths).
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
	for what, p := range paths {
		for _, key := range []string{"", "p"} { // "p": the Prometheus key of kubeEnv
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
