package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

// TestFenceImportCeiling: an export line whose highest is more than
// fence.max_advance above the store's fence (9223372036854775807 would
// lock the resource out for good) refuses the whole import before any
// record is written, and says which record and which knob; a real large
// token goes in when the configuration of the import raises the ceiling.
func TestFenceImportCeiling(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "fencegate.db")
	writeCfg := func(name, extra string) string {
		p := filepath.Join(dir, name)
		y := fmt.Sprintf("gateway:\n  listen: 127.0.0.1:0\n  routes:\n    - {name: o, match: {path_prefix: /o/}, upstream: {url: \"http://127.0.0.1:1\"}, resource: \"{path}\"}\nstore: {embedded: {path: %q}}\n%s", db, extra)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := writeCfg("fencegate.yaml", "fence: {max_advance: 1000}\n")
	export := func(lines ...string) string {
		p := filepath.Join(dir, fmt.Sprintf("export-%d.jsonl", len(lines)))
		os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
		return p
	}
	stored := func(res string) int64 {
		t.Helper()
		st, err := bolt.Open(db, bolt.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		f, err := st.LoadFence(context.Background(), res)
		if err != nil {
			t.Fatal(err)
		}
		return f.Highest
	}

	// The first records are fine; the third would lock /o/3 out.
	bad := export(`{"resource":"/o/1","highest":7}`, `{"resource":"/o/2","highest":1000}`,
		fmt.Sprintf(`{"resource":"/o/3","highest":%d}`, int64(fencegate.MaxToken)))
	_, errOut, code := runCLI("fence", "import", "-c", cfg, bad)
	if code == 0 || !strings.Contains(errOut, "record 3") || !strings.Contains(errOut, fencegate.CodeTokenOutOfRange) ||
		!strings.Contains(errOut, "nothing was imported") || !strings.Contains(errOut, "fence.max_advance") {
		t.Fatalf("import with a huge token: exit %d, %q; want refused at record 3 naming fence.max_advance", code, errOut)
	}
	for _, res := range []string{"/o/1", "/o/2", "/o/3"} {
		if h := stored(res); h != 0 {
			t.Errorf("after the refused import %s stands at %d; want nothing written", res, h)
		}
	}

	// Within the ceiling: imported. The ceiling is above what the store
	// holds, so a second import may go max_advance further.
	if _, errOut, code := runCLI("fence", "import", "-c", cfg, export(`{"resource":"/o/1","highest":7}`, `{"resource":"/o/2","highest":1000}`)); code != 0 {
		t.Fatalf("import within the ceiling: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCLI("fence", "import", "-c", cfg, export(`{"resource":"/o/2","highest":2000}`)); code != 0 {
		t.Fatalf("import 1000 above the stored 1000: exit %d: %s", code, errOut)
	}
	if _, _, code := runCLI("fence", "import", "-c", cfg, export(`{"resource":"/o/1","highest":1008}`)); code == 0 {
		t.Fatal("import 1001 above the stored 7 succeeded")
	}
	if h1, h2 := stored("/o/1"), stored("/o/2"); h1 != 7 || h2 != 2000 {
		t.Errorf("fences %d, %d; want 7, 2000", h1, h2)
	}

	// A real large token (a store restored after years of leases): the
	// configuration of the import lifts the ceiling, as for a hand advance.
	open := writeCfg("restore.yaml", "fence: {max_advance: -1}\n")
	if _, errOut, code := runCLI("fence", "import", "-c", open, export(`{"resource":"/o/9","highest":5000000}`)); code != 0 {
		t.Fatalf("import with max_advance -1: exit %d: %s", code, errOut)
	}
	if h := stored("/o/9"); h != 5000000 {
		t.Errorf("/o/9 at %d; want 5000000", h)
	}

	// The same from the command line, with the ceiling of the usual
	// configuration: --max-advance -1 for this import only; a larger
	// ceiling lets a record as far as it and no further.
	if _, errOut, code := runCLI("fence", "import", "-c", cfg, "--max-advance", "-1", export(`{"resource":"/o/10","highest":7000000}`)); code != 0 {
		t.Fatalf("import with --max-advance -1: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCLI("fence", "import", "-c", cfg, "--max-advance", "10000", export(`{"resource":"/o/11","highest":10000}`)); code != 0 {
		t.Fatalf("import with --max-advance 10000: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCLI("fence", "import", "-c", cfg, "--max-advance", "10000", export(`{"resource":"/o/12","highest":10001}`)); code == 0 || !strings.Contains(errOut, "--max-advance") {
		t.Fatalf("import 10001 with --max-advance 10000: exit %d, %q; want refused, naming --max-advance", code, errOut)
	}
	if _, _, code := runCLI("fence", "import", "-c", cfg, "--max-advance", "0", export(`{"resource":"/o/13","highest":1}`)); code != 2 {
		t.Fatalf("--max-advance 0: exit %d; want 2 (usage)", code)
	}
	if h10, h11, h12 := stored("/o/10"), stored("/o/11"), stored("/o/12"); h10 != 7000000 || h11 != 10000 || h12 != 0 {
		t.Errorf("fences %d, %d, %d; want 7000000, 10000, 0", h10, h11, h12)
	}
}

// TestFenceImportEmptyDoesNotAdopt: after a store loss, the identity file refuses
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
	// The identity file of the store the gateway served from, now lost.
	if err := server.WriteIdentityFile(cfg.Store.IdentityFile, cfg, "the-lost-store"); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"", "\n", "  \n\n"} {
		f := filepath.Join(dir, "export.jsonl")
		os.WriteFile(f, []byte(in), 0o600)
		_, errOut, code := runCLI("fence", "import", "-c", p, f)
		m, err := server.ReadIdentityFile(cfg.Store.IdentityFile)
		if err != nil {
			t.Fatal(err)
		}
		if m.StoreID != "the-lost-store" {
			t.Fatalf("import of %q (exit %d, %q) adopted the empty store: identity file now names %s", in, code, strings.TrimSpace(errOut), m.StoreID)
		}
		if code == 0 {
			t.Errorf("import of %q restored nothing and exited 0: %q", in, errOut)
		}
	}
}
