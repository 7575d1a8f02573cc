package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestExampleConfigs keeps the shipped examples in configs/ and deploy/
// true: each must load, validate and compile its routes.
func TestExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../configs/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example configs found")
	}
	envRef := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var top struct {
				Store map[string]any `yaml:"store"`
			}
			if err := yaml.Unmarshal(data, &top); err == nil && top.Store["etcd"] != nil && !testenv.HasConfigField(config.Config{}, "store", "etcd") {
				// Runs by itself once store.etcd lands (issue 44).
				t.Skip("store.etcd is not in package config yet")
			}
			for _, m := range envRef.FindAllStringSubmatch(string(data), -1) {
				if _, ok := os.LookupEnv(m[1]); !ok {
					t.Setenv(m[1], "postgres://example/db")
				}
			}
			cfg, err := config.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := BuildRoutes(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
				t.Fatal(err)
			}
		})
	}
}
