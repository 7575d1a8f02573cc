package main

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/telemetry"
	"github.com/spf13/cobra"
)

// Set by the release build (scripts/build.sh, scripts/image.sh):
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=<sha>" ./cmd/fencegate
//
// plus "-X main.modified=true" for a tree with uncommitted changes. Empty
// values fall back on the Go build information (telemetry.NewBuildInfo).
var (
	version  string
	commit   string
	modified string
)

// versionInfo is what `fencegate version` prints: the build information
// the metrics (build_info) and the console report too.
type versionInfo struct{ telemetry.BuildInfo }

func (v versionInfo) String() string {
	c := v.Commit
	if c == "" {
		c = "unknown"
	}
	s := fmt.Sprintf("fencegate %s (commit %s", v.Version, c)
	if v.Modified {
		s += ", modified"
	}
	return s + ", " + v.GoVersion + ")"
}

// linkerValues are the -ldflags strings of this binary.
func linkerValues() telemetry.Linker {
	return telemetry.Linker{Version: version, Commit: commit, Modified: modified}
}

// currentVersion is the version of this binary (telemetry.ReadBuildInfo,
// the one place it is worked out); serve hands the same to the server.
func currentVersion() versionInfo {
	return versionInfo{telemetry.ReadBuildInfo(linkerValues())}
}

type versionCmd struct{ printer }

func newVersionCmd() *cobra.Command {
	return wrap(&cobra.Command{
		Use:     "version",
		Short:   "print the version and commit (also: --version)",
		Long:    "Version prints the version, the commit and the Go toolchain the binary was built from.",
		Example: "  fencegate version\n  fencegate --version",
		Args:    noArgs,
	}, &versionCmd{})
}

func (c *versionCmd) Run(ctx context.Context, args []string) error {
	_, err := fmt.Fprintln(c.stdout(), currentVersion())
	return err
}
