package testenv

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// PythonServer starts a Python script that serves HTTP with the standard
// library only (Debian's /usr/bin/python3); the script takes the port as
// its first argument and must answer GET ready (a path) once it serves. It
// returns the base URL, http://127.0.0.1:PORT. args follow the port.
func PythonServer(t testing.TB, script, ready string, args ...string) string {
	t.Helper()
	py := Python(t)
	abs, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	_, ports := startServer(t, filepath.Base(script), 1, nil, py,
		func(p []int) []string { return append([]string{abs, fmt.Sprint(p[0])}, args...) },
		func(ctx context.Context, p *process, ports []int) error {
			return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", ports[0], ready), 20*time.Second, p.done)
		})
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0])
}
