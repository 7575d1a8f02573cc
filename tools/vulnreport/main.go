// Command vulnreport reads `govulncheck -format json` on standard input and
// reports the vulnerabilities the code calls. It exits 1 when any
// vulnerability is called: in a required module (fix: upgrade the module) or
// in the standard library (fix: raise the toolchain in go.mod, which
// scripts/goenv.sh exports as GOTOOLCHAIN). -warn-stdlib reports the
// standard library's as warnings only, for a local run on an older Go.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// The subset of govulncheck's JSON protocol (golang.org/x/vuln
// internal/govulncheck) read here.
type message struct {
	Config *struct {
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
		GoVersion      string `json:"go_version"`
	} `json:"config"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

type vuln struct {
	id, module, version, fixed string
}

func main() {
	// -strict was the opt-in to failing on the standard library's; that is
	// the default now, and the flag is kept so old invocations still parse.
	_ = flag.Bool("strict", true, "deprecated: failing on standard-library vulnerabilities is the default")
	warnStdlib := flag.Bool("warn-stdlib", false, "report called standard-library vulnerabilities as warnings only")
	flag.Parse()
	called, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulnreport:", err)
		os.Exit(2)
	}
	fail := false
	for _, v := range called {
		kind := "module"
		if v.module == "stdlib" {
			kind = "standard library (needs a newer Go toolchain)"
		}
		fmt.Printf("vulnreport: %s called: %s@%s, fixed in %s — %s\n", v.id, v.module, v.version, v.fixed, kind)
		if v.module != "stdlib" || !*warnStdlib {
			fail = true
		}
	}
	if len(called) == 0 {
		fmt.Println("vulnreport: no called vulnerability")
	}
	if fail {
		os.Exit(1)
	}
}

// read returns one entry per called vulnerability and module. A finding
// whose innermost frame names a function is one the code reaches; others
// are only imported or required.
func read(r io.Reader) ([]vuln, error) {
	seen := map[vuln]bool{}
	var out []vuln
	dec := json.NewDecoder(r)
	for {
		var m message
		err := dec.Decode(&m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if c := m.Config; c != nil {
			fmt.Printf("vulnreport: %s, database %s, %s\n", c.ScannerVersion, c.DB, c.GoVersion)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		v := vuln{f.OSV, f.Trace[0].Module, f.Trace[0].Version, f.FixedVersion}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}
