package telemetry

import "runtime/debug"

// BuildInfo says which fencegate runs: what `fencegate version` prints,
// the build_info gauge's labels and the console's overview.
type BuildInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
}

// Linker holds the strings the release build sets with -ldflags -X
// (scripts/build.sh: main.version, main.commit, main.modified); empty when
// the binary was built without them.
type Linker struct {
	Version, Commit, Modified string
}

// ReadBuildInfo is the one place the binary's version is worked out: ld
// (the -ldflags values) combined with the Go build information of the
// running binary.
func ReadBuildInfo(ld Linker) BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return NewBuildInfo(ld, bi)
}

// NewBuildInfo combines the -ldflags values with bi (nil when the binary
// carries no build information). The linker's values win; otherwise the
// module version (set by `go install module@version`) and the vcs.*
// settings Go stamps when it builds inside a git checkout. Version is
// "dev" and Commit empty when nothing says more; GoVersion "unknown"
// without build information.
func NewBuildInfo(ld Linker, bi *debug.BuildInfo) BuildInfo {
	b := BuildInfo{Version: ld.Version, Commit: ld.Commit, Modified: ld.Modified == "true", GoVersion: "unknown"}
	if bi != nil {
		b.GoVersion = bi.GoVersion
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
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
		if b.Commit == "" {
			b.Commit = rev
		}
		// The build information describes its own revision only.
		if rev != "" && rev == b.Commit && modified == "true" {
			b.Modified = true
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}
