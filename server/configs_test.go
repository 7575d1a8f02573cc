package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/fencegate/fencegate/config"
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
