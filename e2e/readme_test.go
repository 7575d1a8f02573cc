package e2e

// The README's Quickstart, run verbatim: the commands are read from
// README.md, not copied here, so the test fails when the README stops
// working as pasted.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// runAsReader runs script in a fresh bash at a copy of the repository's
// root (symlinks, so that what it writes, the binary, ./data and the log,
// stays out of the worktree) with the machine's go (machineGoEnv), and
// returns what it printed.
func runAsReader(t *testing.T, script string) (string, error) {
	t.Helper()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if testenv.CI() {
				t.Fatalf("%s is not installed (scripts/deps.sh installs it)", tool)
			}
			t.Skipf("%s is not installed (scripts/deps.sh installs it)", tool)
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".git", ".cache", "fencegate", "data", "fencegate.log":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = machineGoEnv(t)
	// Its own process group: whatever the script leaves running is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return out.String(), err
}

// TestReadmeFirstCommand runs the README's first command (the demo) as
// pasted, with the machine's go: it must work there as the Quickstart
// does. (The second, scripts/test.sh, is the whole suite that runs this.)
func TestReadmeFirstCommand(t *testing.T) {
	b := repoFile(t, "README.md")
	_, block, ok := strings.Cut(string(b), "\n```sh\n")
	if !ok {
		t.Fatal("README.md has no ```sh block")
	}
	first, _, _ := strings.Cut(block, "\n")
	if !strings.Contains(first, "fencegate demo") {
		t.Fatalf("README.md's first command is %q; this test runs the demo", first)
	}
	got, err := runAsReader(t, first)
	if err != nil {
		t.Fatalf("the README's first command failed: %v\n--- command\n%s\n--- output\n%s", err, first, got)
	}
}

// repoFile reads a file at the repository's root.
func repoFile(t *testing.T, name string) []byte {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// machineGoEnv is this process's environment as a reader's shell would
// have it: the go command that runs tests switched toolchains (go.mod's
// go line) and put that toolchain's bin first in PATH, with GOROOT and
// GOTOOLCHAIN set; all of that goes, and GOTOOLCHAIN=local, a packaged
// Go's setting (Debian's, and go.env's of the official downloads), comes
// in.
func machineGoEnv(t *testing.T) []string {
	t.Helper()
	// The go command first in PATH is the test's toolchain's (go test puts
	// it there); its GOROOT is the directory to take out.
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	toolchainBin := filepath.Join(strings.TrimSpace(string(goroot)), "bin")
	var env []string
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case "GOTOOLCHAIN", "GOROOT":
			continue
		case "PATH":
			var keep []string
			for _, d := range filepath.SplitList(value) {
				if filepath.Clean(d) != toolchainBin {
					keep = append(keep, d)
				}
			}
			kv = "PATH=" + strings.Join(keep, string(os.PathListSeparator))
		}
		env = append(env, kv)
	}
	return append(env, "GOTOOLCHAIN=local")
}

// TestReadmeToolchain: every GOTOOLCHAIN the README names (the first
// command's, the Quickstart's export) is go.mod's go line, so a reader's
// packaged Go fetches the toolchain the module needs.
func TestReadmeToolchain(t *testing.T) {
	mod := repoFile(t, "go.mod")
	want := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if want == nil {
		t.Fatal("go.mod has no go line")
	}
	readme := repoFile(t, "README.md")
	named := regexp.MustCompile(`GOTOOLCHAIN=(go[0-9][0-9.]*)`).FindAllSubmatch(readme, -1)
	if len(named) < 2 {
		t.Fatalf("README.md names GOTOOLCHAIN %d times; want the first command's and the Quickstart's", len(named))
	}
	for _, m := range named {
		if string(m[1]) != "go"+string(want[1]) {
			t.Errorf("README.md names GOTOOLCHAIN=%s; go.mod's go line is %s", m[1], want[1])
		}
	}
	if !strings.Contains(readmeBlock(t, "Quickstart"), "export GOTOOLCHAIN=") {
		t.Error("the Quickstart does not export GOTOOLCHAIN: a packaged Go (GOTOOLCHAIN=local) cannot build the module")
	}
}

// readmeBlock returns the first ```sh block after the line "## heading"
// of README.md.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	b := repoFile(t, "README.md")
	s := string(b)
	i := strings.Index(s, "\n## "+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", "## "+heading)
	}
	s = s[i:]
	if next := strings.Index(s[1:], "\n## "); next >= 0 {
		s = s[:next+1]
	}
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatalf("README.md section %q has no ```sh block", heading)
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```")
	if end < 0 {
		t.Fatalf("README.md section %q: unterminated block", heading)
	}
	return s[:end+1]
}

// TestReadmeQuickstart pastes the Quickstart into a fresh bash at a copy of
// the repository's root (symlinks, so that what the block writes, the
// binary, ./data and the log, stays out of the worktree) and checks that
// it shows a forward, a stale refusal with its JSON body, and an upstream
// that applied only the first write. The shell gets the machine's go, as
// a reader's would have, with none of the toolchain this test runs under:
// a packaged Go runs with GOTOOLCHAIN=local and must be told go.mod's
// version by the block itself.
func TestReadmeQuickstart(t *testing.T) {
	script := readmeBlock(t, "Quickstart")
	got, err := runAsReader(t, script)
	if err != nil {
		t.Fatalf("the Quickstart failed: %v\n--- script\n%s--- output\n%s", err, script, got)
	}
	for _, want := range []string{
		"configs/quickstart.yaml: ok",
		"applied PUT /orders/7\nHTTP 200\n",
		`{"error":"stale_fencing_token","message":"token 1 is older than 2 already accepted for /orders/7","resource":"/orders/7","token":1,"highest":2,"route":"orders"}` + "\nHTTP 409\n",
		`"value":"{\"status\":\"shipped\"}","token":"1"`,
		`"msg":"stale_fencing_token"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the Quickstart's output lacks %q", want)
		}
	}
	if strings.Contains(got, "cancelled\\\"") {
		t.Errorf("the upstream applied A's stale write")
	}
	if t.Failed() {
		t.Logf("output:\n%s", got)
	}
}
