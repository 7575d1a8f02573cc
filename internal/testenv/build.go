package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildMu   sync.Mutex
	buildDir  string
	buildBins = map[string]string{}
)

// BuildBinary builds pkg of the main module (e.g. "./cmd/fencegate") once per
// test binary, with -race when this test binary has the race detector, and
// returns the executable's path. RunMain removes it at exit.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	atExitMu.Lock()
	ok := mainRunning
	atExitMu.Unlock()
	if !ok {
		t.Fatalf("testenv: BuildBinary needs func TestMain(m *testing.M) { testenv.RunMain(m) } in this package, so the binary is removed at exit")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildBins[pkg]; ok {
		return p
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if buildDir == "" {
		buildDir, err = os.MkdirTemp("", "fencegate-bin-")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		dir := buildDir
		onExit(func() { os.RemoveAll(dir) })
	}
	out := filepath.Join(buildDir, fmt.Sprintf("%s-%d", filepath.Base(pkg), len(buildBins)))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	buildBins[pkg] = out
	return out
}

// goTool is the go command of the toolchain running the tests: `go test`
// puts its own GOROOT/bin first on the test binary's PATH (Go 1.19+), so
// the plain name finds it (runtime.GOROOT is deprecated).
func goTool() string { return "go" }
