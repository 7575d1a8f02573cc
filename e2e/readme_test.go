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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// readmeBlock returns the first ```sh block after the line "## heading"
// of README.md.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
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
// that applied only the first write.
func TestReadmeQuickstart(t *testing.T) {
	script := readmeBlock(t, "Quickstart")
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
	// The go command of this toolchain first in PATH.
	goroot, gerr := exec.Command("go", "env", "GOROOT").Output()
	if gerr != nil {
		t.Fatalf("go env GOROOT: %v", gerr)
	}
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(strings.TrimSpace(string(goroot)), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	// Its own process group: whatever the block leaves running is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("the Quickstart failed: %v\n--- script\n%s--- output\n%s", err, script, out.String())
	}
	got := out.String()
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
