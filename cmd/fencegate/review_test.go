package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

// TestFenceImportEmptyDoesNotAdopt: after a store loss, the marker refuses
// the start until fences are restored. An import of an empty input (the
// `ssh old-host fencegate fence export | fencegate fence import -` whose
// ssh failed, a truncated or wrong file) restores nothing, so it must not
// adopt the new store: that would be --accept-empty-store without anyone
// asking, and every zombie's token would look new to the gateway.
func TestFenceImportEmptyDoesNotAdopt(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "fencegate.db")
	p := filepath.Join(dir, "fencegate.yaml")
	y := fmt.Sprintf("gateway:\n  listen: 127.0.0.1:0\n  routes:\n    - {name: o, match: {path_prefix: /o/}, upstream: {url: \"http://127.0.0.1:1\"}, resource: \"{path}\"}\nstore: {embedded: {path: %q}}\n", db)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	// The marker of the store the gateway served from, now lost.
	if err := server.WriteMarker(cfg.Store.Marker, cfg, "the-lost-store"); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"", "\n", "  \n\n"} {
		f := filepath.Join(dir, "export.jsonl")
		os.WriteFile(f, []byte(in), 0o600)
		_, errOut, code := runCLI("fence", "import", "-c", p, f)
		m, err := server.ReadMarker(cfg.Store.Marker)
		if err != nil {
			t.Fatal(err)
		}
		if m.StoreID != "the-lost-store" {
			t.Fatalf("import of %q (exit %d, %q) adopted the empty store: marker now names %s", in, code, strings.TrimSpace(errOut), m.StoreID)
		}
		if code == 0 {
			t.Errorf("import of %q restored nothing and exited 0: %q", in, errOut)
		}
	}
}
