package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

// TestListCommands: fence list and refusals print what the store holds,
// as an aligned table and as JSON, through the admin API with its key.
func TestListCommands(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "fencegate.db")
	cfg, err := config.Parse("t.yaml", []byte(fmt.Sprintf(`
gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: orders, match: {path_prefix: /orders/}, upstream: {url: "http://127.0.0.1:1"}, resource: "{path}"}
store: {embedded: {path: %s}}
admin:
  listen: 127.0.0.1:0
  auth: {api_keys: [{owner: ops, sha256: %q}]}
`, db, auth.HashKey("k"))))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(context.Background(), cfg, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	admin := "http://" + s.Addr("admin")
	t.Setenv("FENCEGATE_ADMIN", admin)
	t.Setenv("FENCEGATE_API_KEY", "k")
	// 1,205 fences: more than one page of the CLI's walk.
	want := map[string]int64{}
	for i := range 1205 {
		k := fmt.Sprintf("/orders/%04d", i)
		want[k] = int64(i + 1)
		body := fmt.Sprintf(`{"resource":%q,"token":%d,"owner":"cli test"}`, k, i+1)
		req, _ := http.NewRequest("POST", admin+"/v1/fences/advance", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("advance %s: %v %v", k, resp, err)
		}
		resp.Body.Close()
	}
	gw := "http://" + s.Addr("gateway")
	req, _ := http.NewRequest("PUT", gw+"/orders/0003", strings.NewReader("x"))
	req.Header.Set("Fencing-Token", "1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 409 {
		t.Fatalf("stale write: %v %v", resp, err)
	}

	run := func(what string, args ...string) string {
		t.Helper()
		argv := map[string][]string{"fences": {"fence", "list"}, "refusals": {"refusals"}}[what]
		out, errOut, code := runCLI(append(argv, args...)...)
		if code != 0 {
			t.Fatalf("%s %q: exit %d: %s", what, args, code, errOut)
		}
		return out
	}
	table := run("fences", "-prefix", "/orders/")
	var jsonOut []fencegate.FenceState
	if err := json.Unmarshal([]byte(run("fences", "-prefix", "/orders/", "-o", "json")), &jsonOut); err != nil {
		t.Fatal(err)
	}
	refusals := run("refusals")
	t.Logf("fence list (head):\n%s\nrefusals:\n%s", strings.Join(strings.SplitN(table, "\n", 4)[:3], "\n"), refusals)

	// Compare with the store itself, opened after the server let it go.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Shutdown(ctx)
	st, err := bolt.Open(db, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var stored []fencegate.FenceState
	for after := ""; ; {
		page, err := st.ListFences(ctx, "/orders/", after, 500)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, page...)
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Resource
	}
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(stored) != 1205 || len(jsonOut) != len(stored) || len(lines) != len(stored)+1 {
		t.Fatalf("store %d, json %d, table %d lines; want 1205, 1205, 1206", len(stored), len(jsonOut), len(lines))
	}
	if !strings.HasPrefix(lines[0], "RESOURCE") || !strings.Contains(lines[0], "HIGHEST") {
		t.Errorf("table header %q", lines[0])
	}
	col := strings.Index(lines[0], "HIGHEST")
	for i, f := range stored {
		if jsonOut[i].Resource != f.Resource || jsonOut[i].Highest != f.Highest || f.Highest != want[f.Resource] {
			t.Fatalf("row %d: json %+v, store %+v", i, jsonOut[i], f)
		}
		fields := strings.Fields(lines[i+1])
		if fields[0] != f.Resource || fields[1] != fmt.Sprint(f.Highest) || !strings.HasPrefix(lines[i+1][col:], fmt.Sprint(f.Highest)) {
			t.Fatalf("table row %q; store %+v (columns aligned at %d)", lines[i+1], f, col)
		}
	}
	if !strings.Contains(refusals, "stale_fencing_token") || !strings.Contains(refusals, "/orders/0003") {
		t.Errorf("refusals table:\n%s", refusals)
	}
}

func TestListUsage(t *testing.T) {
	for _, args := range [][]string{{"-o", "yaml"}, {"stray"}} {
		_, errOut, code := runCLI(append([]string{"fence", "list"}, args...)...)
		if code != exitUsage {
			t.Errorf("fence list %q: exit %d (%s); want a usage error", args, code, errOut)
		}
	}
}
