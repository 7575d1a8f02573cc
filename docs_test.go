package fencegate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches inline Markdown links and images: [text](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocLinks checks that every relative link in README.md, CHANGELOG.md
// and docs/ names a file or directory of the repository.
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"README.md", "CHANGELOG.md"}, docs...)
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
					continue
				}
				links++
				path, _, _ := strings.Cut(target, "#")
				if _, err := os.Stat(filepath.Join(filepath.Dir(f), path)); err != nil {
					t.Errorf("%s:%d: link %q: no such file", f, i+1, target)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found; the pattern is broken")
	}
}
