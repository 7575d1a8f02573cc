package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/fencegate/fencegate/config"
)

// Compose schema: the fields this compose file uses.
// compose is the strict schema of the subset of the compose specification
// compose.yaml uses.
type compose struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		ReadOnly    bool              `yaml:"read_only"`
		Restart     string            `yaml:"restart"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test     []string `yaml:"test"`
			Interval string   `yaml:"interval"`
			Timeout  string   `yaml:"timeout"`
			Retries  int      `yaml:"retries"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]struct{} `yaml:"volumes"`
}

func TestCompose(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
		t.Fatalf("compose.yaml: %v", yaml.FormatError(err, false, true))
	}
	for _, want := range []string{"fencegate", "postgres", "versitygw", "jaeger"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("compose has no %s service", want)
		}
	}
	for name, s := range c.Services {
		for dep, d := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
			}
			if d.Condition == "service_healthy" && c.Services[dep].Healthcheck == nil {
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s mounts undeclared volume %s", name, src)
			}
		}
	}
	fg := c.Services["fencegate"]
	if fg.Build == nil {
		t.Fatal("fencegate must be built from this repository")
	}
	if _, err := os.Stat(filepath.Join(fg.Build.Context, fg.Build.Dockerfile)); err != nil {
		t.Errorf("build: %v", err)
	}
	// The mounted config is valid with the service's environment, and its
	// upstreams and exporters name compose services.
	var cfgFile string
	for _, v := range fg.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == "/etc/fencegate/fencegate.yaml" {
			cfgFile = parts[0]
		}
	}
	if cfgFile == "" || !slices.Contains(fg.Command, "/etc/fencegate/fencegate.yaml") {
		t.Fatalf("fencegate must mount and run /etc/fencegate/fencegate.yaml (volumes %v, command %v)", fg.Volumes, fg.Command)
	}
	for k, v := range fg.Environment {
		t.Setenv(k, v)
	}
	raw, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(cfgFile, raw)
	if err != nil {
		t.Fatalf("compose fencegate config: %v", err)
	}
	hosts := []string{cfg.Telemetry.OTLPEndpoint, cfg.Store.Postgres.URL}
	for _, r := range cfg.Gateway.Routes {
		if r.S3 != nil {
			hosts = append(hosts, r.S3.Endpoint)
		}
	}
	for _, h := range hosts {
		found := false
		for name := range c.Services {
			if strings.Contains(h, "@"+name+":") || strings.Contains(h, "//"+name+":") {
				found = true
			}
		}
		if !found {
			t.Errorf("%q names no compose service", h)
		}
	}
}
