package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by the release build (scripts/build.sh, scripts/image.sh):
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=<sha>" ./cmd/fencegate
//
// plus "-X main.modified=true" for a tree with uncommitted changes. Empty
// values fall back on the Go build information (see buildVersion).
var (
	version  string
	commit   string
	modified string
)

// versionInfo is what `fencegate version` prints.
type versionInfo struct {
	Version  string // a tag, a module pseudo-version, or "dev"
	Commit   string // VCS revision, or "unknown"
	Modified bool   // the tree had uncommitted changes at build time
	Go       string // toolchain version
}

func (v versionInfo) String() string {
	s := fmt.Sprintf("fencegate %s (commit %s", v.Version, v.Commit)
	if v.Modified {
		s += ", modified"
	}
	return s + ", " + v.Go + ")"
}

// buildVersion combines the -ldflags values with bi (nil when the binary
// carries no build information). The linker's values win; otherwise the
// module version (set by `go install module@version`) and the vcs.*
// settings Go stamps when it builds inside a git checkout.
func buildVersion(ld ldValues, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: ld.version, Commit: ld.commit, Modified: ld.modified == "true", Go: "unknown"}
	if bi != nil {
		v.Go = bi.GoVersion
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if v.Commit == "" {
			v.Commit = rev
		}
		// The build information describes its own revision only.
		if rev != "" && rev == v.Commit && modified == "true" {
			v.Modified = true
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

// ldValues are the strings the linker may set.
type ldValues struct{ version, commit, modified string }

func currentVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildVersion(ldValues{version, commit, modified}, bi)
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
