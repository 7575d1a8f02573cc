package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Python returns a python3 that can import every module in modules.
// Debian's /usr/bin/python3 comes first (scripts/deps.sh installs
// python3-werkzeug for it), then python3 in PATH.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	cands := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	for _, py := range cands {
		args := []string{"-c", ""}
		for _, m := range modules {
			args[1] += "import " + m + "\n"
		}
		if err := exec.Command(py, args...).Run(); err == nil {
			return py
		}
	}
	missing(t, fmt.Sprintf("python3 with %v", modules), "run scripts/deps.sh (installs Debian's python3-werkzeug)")
	return ""
}

// WSGIApp starts a Python script serving a werkzeug application; the script
// takes the port as its only argument and must answer GET ready (a path)
// once it serves. It returns the base URL, http://127.0.0.1:PORT.
func WSGIApp(t testing.TB, script, ready string) string {
	t.Helper()
	py := Python(t, "werkzeug")
	abs, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	_, ports := startServer(t, filepath.Base(script), 1, nil, py,
		func(p []int) []string { return []string{abs, fmt.Sprint(p[0])} },
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", ports[0], ready), 20*time.Second, p.done)
		})
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0])
}
