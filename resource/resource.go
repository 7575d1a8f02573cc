// Package resource derives fence keys from requests: the canonical form of
// a request path and the route's resource template.
package resource

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// CleanPath returns the one canonical spelling of an escaped request path, as
// a slice of decoded segments. The gateway derives resource keys from this
// form and forwards this form upstream, so two spellings of one upstream
// object can never map to two fence keys (docs/design.md §3, step 4).
//
// Empty segments ("//") and "." segments are dropped. Requests the gateway
// cannot map to exactly one upstream object are refused: ".." segments (after
// decoding, so "%2e%2e" too), encoded slashes and backslashes (upstreams
// disagree on whether "%2F" separates segments), NUL and other control
// characters, and invalid percent-encoding.
func CleanPath(escaped string) ([]string, error) { return cleanPath(escaped, false) }

// ErrEncodedSlash is CleanPath's error for a path with an encoded slash
// (%2F) in a segment.
var ErrEncodedSlash = errors.New("path contains an encoded slash (%2F)")

// CleanObjectPath is CleanPath for upstreams that name objects with one
// path segment in which "/" is sent as %2F (the GCS JSON API, Azure Blob
// Storage with its SDKs): a decoded segment may contain "/", and JoinPath
// encodes it again as %2F. Such an upstream takes the segment as one name,
// so the segment is one key, whichever way its slash was spelled.
func CleanObjectPath(escaped string) ([]string, error) { return cleanPath(escaped, true) }

func cleanPath(escaped string, slashes bool) ([]string, error) {
	if escaped == "" || escaped == "*" {
		return nil, nil
	}
	if escaped[0] != '/' {
		return nil, errors.New("path must start with /")
	}
	raw := strings.Split(escaped[1:], "/")
	segs := make([]string, 0, len(raw))
	for _, s := range raw {
		if s == "" {
			continue
		}
		d := s
		if strings.IndexByte(s, '%') >= 0 {
			var err error
			if d, err = url.PathUnescape(s); err != nil {
				return nil, fmt.Errorf("invalid percent-encoding in %q", s)
			}
		}
		switch d {
		case ".":
			continue
		case "..":
			return nil, errors.New(`path contains a ".." segment`)
		}
		for i := 0; i < len(d); i++ {
			c := d[i]
			switch {
			case c == '/' && !slashes:
				return nil, ErrEncodedSlash
			case c == '\\':
				return nil, errors.New("path contains a backslash")
			case c < 0x20 || c == 0x7f:
				return nil, fmt.Errorf("path contains control character %#x", c)
			}
		}
		segs = append(segs, d)
	}
	return segs, nil
}

// JoinPath is the inverse of CleanPath: the canonical escaped form of segs.
func JoinPath(segs []string, trailingSlash bool) string {
	if len(segs) == 0 {
		return "/"
	}
	n := len(segs) + 1
	for _, s := range segs {
		n += len(s) // escaping may add more
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	if trailingSlash {
		b.WriteByte('/')
	}
	return b.String()
}

// A Template turns request variables into a resource key. It is compiled
// once from the route's `resource` string, e.g. "{path}", "{path.2}",
// "tenant:{header.X-Tenant}/{path}", "{bucket}/{key}".
type Template struct {
	src   string
	parts []tmplPart
}

type tmplPart struct {
	lit string // literal text, when name is ""
	// name is the variable: "path", "path.N", "host", "header.Name", or any
	// name an upstream adapter supplies (bucket, key).
	name string
	n    int // for path.N, 1-based
}

// Vars supplies template variables; ok is false for an unknown or absent one.
type Vars func(name string) (value string, ok bool)

// ParseTemplate compiles a resource template. known reports which variable
// names the route's upstream provides besides the built-in ones.
func ParseTemplate(src string, known func(name string) bool) (*Template, error) {
	t := &Template{src: src}
	rest := src
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if j := strings.IndexByte(rest, '}'); j >= 0 && (i < 0 || j < i) {
			return nil, fmt.Errorf("unmatched } at offset %d", len(src)-len(rest)+j)
		}
		if i < 0 {
			t.parts = append(t.parts, tmplPart{lit: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, tmplPart{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unclosed { at offset %d", len(src)-len(rest)+i)
		}
		name := rest[i+1 : i+j]
		p := tmplPart{name: name}
		switch {
		case name == "path", name == "host":
		case strings.HasPrefix(name, "path."):
			n, err := strconv.Atoi(name[len("path."):])
			if err != nil || n < 1 {
				return nil, fmt.Errorf("{%s}: path segments are numbered from 1", name)
			}
			p.n = n
		case strings.HasPrefix(name, "header."):
			if len(name) == len("header.") {
				return nil, fmt.Errorf("{header.}: missing header name")
			}
		case known != nil && known(name):
		default:
			return nil, fmt.Errorf("unknown variable {%s} (want {path}, {path.N}, {host}, {header.Name} or a variable of the route's upstream)", name)
		}
		t.parts = append(t.parts, p)
		rest = rest[i+j+1:]
	}
	if len(t.parts) == 0 {
		return nil, errors.New("empty resource template")
	}
	return t, nil
}

func (t *Template) String() string { return t.src }

// Expand builds the resource key. Every variable must be present and
// non-empty: a key built from a missing part would merge unrelated resources.
func (t *Template) Expand(vars Vars) (string, error) {
	if len(t.parts) == 1 && t.parts[0].name != "" {
		return t.expandPart(t.parts[0], vars)
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		v, err := t.expandPart(p, vars)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func (t *Template) expandPart(p tmplPart, vars Vars) (string, error) {
	v, ok := vars(p.name)
	if !ok || v == "" {
		return "", fmt.Errorf("resource template %q: {%s} is missing in this request", t.src, p.name)
	}
	return v, nil
}

// MaxKeyLen is the longest resource key, in bytes, the gateway accepts (and
// a lease may name). Longer keys are refused as invalid_resource (400)
// before they reach a store: they are client input, not an outage.
const MaxKeyLen = 1024

// Uses reports whether the template reads variable name ("host", "path",
// "header.X-Tenant", ...).
func (t *Template) Uses(name string) bool {
	for _, p := range t.parts {
		if p.name == name {
			return true
		}
	}
	return false
}

// Headers returns the request headers the template reads ({header.Name}),
// as written in the template.
func (t *Template) Headers() []string {
	var hs []string
	for _, p := range t.parts {
		if h, ok := strings.CutPrefix(p.name, "header."); ok {
			hs = append(hs, h)
		}
	}
	return hs
}
