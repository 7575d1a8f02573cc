package telemetry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/telemetry"
)

// TestBuildInfoGauge: build_info carries the version the command hands
// in (its -ldflags values), not only the Go build information.
func TestBuildInfoGauge(t *testing.T) {
	bi := telemetry.BuildInfo{Version: "v9.9.9-test", GoVersion: "go1.99", Commit: "abc123"}
	tel, err := telemetry.New(context.Background(), telemetry.Options{Build: bi})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	want := `
# HELP fencegate_build_info Always 1; the labels say which fencegate runs (version, Go version, VCS commit).
# TYPE fencegate_build_info gauge
fencegate_build_info{commit="abc123",goversion="go1.99",version="v9.9.9-test"} 1
`
	if err := testutil.GatherAndCompare(tel.Registry, strings.NewReader(want), "fencegate_build_info"); err != nil {
		t.Error(err)
	}
	if tel.Build != bi {
		t.Errorf("Build = %+v; want %+v", tel.Build, bi)
	}
	// Without one: the Go build information, never an empty version.
	def, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	if def.Build.Version == "" || def.Build.GoVersion == "" {
		t.Errorf("default Build = %+v", def.Build)
	}
}
