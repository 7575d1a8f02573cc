package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/telemetry"
)

func TestBuildVersion(t *testing.T) {
	bi := func(mainVersion string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: mainVersion}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	for _, tc := range []struct {
		name string
		ld   telemetry.Linker
		bi   *debug.BuildInfo
		want string
	}{
		{"nothing", telemetry.Linker{}, nil, "fencegate dev (commit unknown, unknown)"},
		{"devel checkout", telemetry.Linker{}, bi("(devel)", "vcs.revision", "abc123", "vcs.modified", "false"),
			"fencegate dev (commit abc123, go1.26.8)"},
		{"modified checkout", telemetry.Linker{}, bi("(devel)", "vcs.revision", "abc123", "vcs.modified", "true"),
			"fencegate dev (commit abc123, modified, go1.26.8)"},
		{"go install module@version", telemetry.Linker{}, bi("v0.1.0"), "fencegate v0.1.0 (commit unknown, go1.26.8)"},
		{"ldflags win", telemetry.Linker{Version: "v0.2.0", Commit: "def456", Modified: "false"}, bi("v0.1.0", "vcs.revision", "abc123", "vcs.modified", "true"),
			"fencegate v0.2.0 (commit def456, go1.26.8)"},
		{"ldflags modified", telemetry.Linker{Version: "v0.2.0", Commit: "def456", Modified: "true"}, nil, "fencegate v0.2.0 (commit def456, modified, unknown)"},
		{"ldflags version only", telemetry.Linker{Version: "v0.2.0"}, bi("(devel)", "vcs.revision", "abc123", "vcs.modified", "true"),
			"fencegate v0.2.0 (commit abc123, modified, go1.26.8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (versionInfo{telemetry.NewBuildInfo(tc.ld, tc.bi)}).String(); got != tc.want {
				t.Fatalf("got %q; want %q", got, tc.want)
			}
		})
	}
}

func TestVersionCmd(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, _, code := runCLI(args...)
		if code != 0 || !strings.HasPrefix(out, "fencegate ") || !strings.Contains(out, "(commit ") {
			t.Fatalf("%q: exit %d, %q", args, code, out)
		}
		if want := currentVersion().String() + "\n"; out != want {
			t.Fatalf("%q: %q; want %q", args, out, want)
		}
	}
	if _, _, code := runCLI("version", "extra"); code != exitUsage {
		t.Fatalf("stray argument: exit %d; want %d", code, exitUsage)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func gitOutput(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b))
}

// The release build stamps version and commit through -ldflags; a plain
// `go build` in the checkout gets the commit from the build information
// (-buildvcs=true: GOFLAGS may turn VCS stamping off).
// Both binaries are run, as a user would.
func TestVersionStamped(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	head := gitOutput(t, root, "rev-parse", "HEAD")
	dir := t.TempDir()
	run := func(bin string, args ...string) string {
		t.Helper()
		b, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, b)
		}
		return strings.TrimSpace(string(b))
	}

	rel := filepath.Join(dir, "fencegate-release")
	cmd := exec.Command("bash", filepath.Join(root, "scripts/build.sh"), rel)
	cmd.Env = append(os.Environ(), "VERSION=v9.9.9-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, b)
	}
	for _, arg := range []string{"version", "--version"} {
		got := run(rel, arg)
		if !strings.HasPrefix(got, "fencegate v9.9.9-test (commit "+head) {
			t.Fatalf("%s: %q; want version v9.9.9-test and commit %s", arg, got, head)
		}
	}
	// The running gateway reports the same version in build_info.
	admin := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfgFile := filepath.Join(dir, "fencegate.yaml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(`gateway:
  listen: 127.0.0.1:0
  routes:
    - {name: orders, match: {path_prefix: /orders/}, upstream: {url: "http://127.0.0.1:1"}, resource: "{path}"}
store: {embedded: {path: %q}}
admin: {listen: %q}
`, filepath.Join(dir, "fencegate.db"), admin)), 0o600)
	srv := exec.Command(rel, "serve", "-c", cfgFile)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	testenv.WaitHTTP(t, "http://"+admin+"/healthz", 30*time.Second)
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`fencegate_build_info{commit=%q,goversion=%q,version="v9.9.9-test"} 1`, head, runtime.Version())
	if !strings.Contains(string(metrics), want) {
		t.Fatalf("metrics of the release binary lack %s:\n%s", want, grepLines(string(metrics), "build_info"))
	}

	dev := filepath.Join(dir, "fencegate-dev")
	cmd = exec.Command("go", "build", "-buildvcs=true", "-o", dev, "./cmd/fencegate")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	// Go stamps VCS information (and, since Go 1.24, a pseudo-version
	// from it) where .git is a directory; in a git worktree (.git is a
	// file) older toolchains stamp none, and the version then says so.
	got := run(dev, "version")
	stamped := strings.HasPrefix(got, "fencegate ") && strings.Contains(got, "(commit "+head)
	if fi, err := os.Stat(filepath.Join(root, ".git")); err == nil && fi.IsDir() {
		if !stamped {
			t.Fatalf("plain build: %q; want commit %s from the build information", got, head)
		}
	} else if !stamped && !strings.HasPrefix(got, "fencegate dev (commit unknown") {
		t.Fatalf("plain build in a worktree: %q; want commit %s, or dev and commit unknown", got, head)
	}
}
