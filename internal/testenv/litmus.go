package testenv

import (
	"os/exec"
	"testing"
)

// Litmus returns the path of litmus, the WebDAV server test suite (Debian
// package litmus), failing (CI=true) or skipping the test without it.
func Litmus(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("litmus")
	if err != nil {
		missing(t, "litmus", "run scripts/deps.sh (apt-get install litmus)")
	}
	return bin
}
