package gateway

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate/resource"
)

// requestVars are the built-in template variables of one request.
type requestVars struct {
	segs   []string
	path   string // canonical escaped path
	host   string
	header func(string) []string
	extra  map[string]string // from the upstream adapter
	fold   bool              // lower-case everything (case-insensitive upstream)
}

func (rv *requestVars) lookup(name string) (string, bool) {
	v, ok := rv.lookupRaw(name)
	if ok && rv.fold {
		if name == "path" {
			v = foldPath(v)
		} else {
			v = strings.ToLower(v)
		}
	}
	return v, ok
}

// foldPath folds the case of a canonical escaped path the way the other
// variables are folded: on the decoded letters. Lower-casing the escaped
// form alone folds only ASCII, and leaves Ü (%C3%9C) and ü (%C3%BC) two
// keys for what a case-folding upstream takes for one object. The result
// is lower-cased once more so that the escapes' hex digits are lower-case
// too, the same key strings.ToLower gives a path without upper-case
// non-ASCII letters.
func foldPath(p string) string {
	if strings.IndexByte(p, '%') < 0 {
		return strings.ToLower(p)
	}
	segs, err := resource.CleanPath(p)
	if err != nil {
		return strings.ToLower(p)
	}
	for i, s := range segs {
		if utf8.ValidString(s) {
			segs[i] = strings.ToLower(s)
		}
	}
	return strings.ToLower(resource.JoinPath(segs, len(segs) > 0 && strings.HasSuffix(p, "/")))
}

func (rv *requestVars) lookupRaw(name string) (string, bool) {
	switch {
	case name == "path":
		return rv.path, true
	case name == "host":
		return rv.host, rv.host != ""
	case strings.HasPrefix(name, "path."):
		n, _ := strconv.Atoi(name[len("path."):])
		if n < 1 || n > len(rv.segs) {
			return "", false
		}
		return rv.segs[n-1], true
	case strings.HasPrefix(name, "header."):
		vs := rv.header(name[len("header."):])
		if len(vs) != 1 {
			// Absent or repeated: either way not one well-defined key.
			return "", false
		}
		return vs[0], true
	}
	v, ok := rv.extra[name]
	return v, ok
}
