package gateway

import (
	"strconv"
	"strings"
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
		v = strings.ToLower(v)
	}
	return v, ok
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
