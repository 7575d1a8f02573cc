package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configuration with only a coordinator has no gateway to check: doctor
// answers a usage error that says so (it must not reach the nil gateway).
func TestDoctorCoordinatorOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "coordinator.yaml")
	cfg := "store:\n  embedded: {path: " + filepath.Join(dir, "fencegate.db") + "}\n" +
		"coordinator: {enabled: true, listen: 127.0.0.1:0}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI("doctor", "-c", path)
	if code != exitUsage || !strings.Contains(errOut, "no gateway") {
		t.Fatalf("exit %d, %q; want a usage error naming the missing gateway", code, errOut)
	}
}
