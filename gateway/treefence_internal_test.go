package gateway

import (
	"slices"
	"testing"
)

// TestTreeAbove: a TreeFence gets each key a request writes with the
// ScopeMember keys above it; those are not admitted on their own unless
// no key of the request is below them.
func TestTreeAbove(t *testing.T) {
	type want struct {
		above []string
		own   bool
	}
	for _, tc := range []struct {
		name string
		adms []admission
		want []want
	}{
		{"path", []admission{{"/", ScopeMember}, {"/dav", ScopeMember}, {"/dav/a", ScopeTree}, {"/dav/b", ScopeMember}, {"/dav/b/c", ScopeTree}},
			[]want{{nil, false}, {nil, false}, {[]string{"/", "/dav"}, true}, {nil, false}, {[]string{"/", "/dav", "/dav/b"}, true}}},
		{"bucket", []admission{{"b", ScopeMember}, {"b/k", ScopeKey}},
			[]want{{nil, false}, {[]string{"b"}, true}}},
		{"sibling prefix", []admission{{"b", ScopeMember}, {"bx/k", ScopeKey}},
			[]want{{nil, true}, {nil, true}}},
	} {
		for i, w := range tc.want {
			above, own := treeAbove(tc.adms, i)
			if !slices.Equal(above, w.above) || own != w.own {
				t.Errorf("%s: treeAbove(%s) = %q, %v; want %q, %v", tc.name, tc.adms[i].key, above, own, w.above, w.own)
			}
		}
	}
}
