package server_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/fencegate/fencegate"

// wiring are the packages that may know the configuration's shape: config
// itself, the mapping from it to library options (server) and the binaries
// (fencegate, and the benchmark drivers that run its serve code), and the
// generator of the configuration's JSON schema (config/internal: go generate).
var wiring = []string{module + "/config", module + "/config/internal/", module + "/server", module + "/cmd/", module + "/bench/cmd/"}

func isWiring(path string) bool {
	for _, w := range wiring {
		if path == w || (strings.HasSuffix(w, "/") && strings.HasPrefix(path, w)) {
			return true
		}
	}
	return false
}

// TestLibrariesDoNotImportConfig: no library package depends, directly or
// through another package of the module, on package config. Libraries take
// options of their own and server maps the configuration to them, so that a
// change of the YAML shape touches only config and server (options.go).
// Test files are not held to it.
func TestLibrariesDoNotImportConfig(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{} // module package -> its module imports
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tools") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(p, 0)
		if err != nil {
			return nil // no (non-test) Go files here
		}
		rel, _ := filepath.Rel(root, p)
		path := module
		if rel != "." {
			path += "/" + filepath.ToSlash(rel)
		}
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				imports[path] = append(imports[path], imp)
			}
		}
		if _, ok := imports[path]; !ok {
			imports[path] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := imports[module+"/gateway"]; !ok {
		t.Fatalf("found no package %s/gateway under %s", module, root)
	}
	// via returns the import chain from p to config, if there is one.
	var via func(p string, seen map[string]bool) []string
	via = func(p string, seen map[string]bool) []string {
		if seen[p] {
			return nil
		}
		seen[p] = true
		for _, imp := range imports[p] {
			if imp == module+"/config" {
				return []string{p, imp}
			}
			if chain := via(imp, seen); chain != nil {
				return append([]string{p}, chain...)
			}
		}
		return nil
	}
	for p := range imports {
		if isWiring(p) {
			continue
		}
		if chain := via(p, map[string]bool{}); chain != nil {
			t.Errorf("%s depends on package config (%s); give it options of its own and map them in server/options.go",
				p, strings.Join(chain, " -> "))
		}
	}
}
