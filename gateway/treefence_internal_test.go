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

// TestAdmissionsByMethod: on a {path} route (hierarchical by default, the
// default fenced methods) a write of a key is ScopeKey on it and
// ScopeMember on the tree key of every collection above it the route
// serves; a tree write (TreeMethod, a Destination) adds ScopeTree on its
// own tree key; the root is its own tree key.
func TestAdmissionsByMethod(t *testing.T) {
	rt, err := NewRoute(RouteOptions{Name: "dav", PathPrefix: "/dav/", Resource: "{path}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	root, err := NewRoute(RouteOptions{Name: "all", Resource: "{path}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	flat, err := NewRoute(RouteOptions{Name: "flat", PathPrefix: "/dav/", Resource: "{path}", Hierarchical: &off}, nil)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := NewRoute(RouteOptions{Name: "webdav", PathPrefix: "/dav/", Resource: "{path}",
		FencedMethods: []string{"PUT", "DELETE", "COPY", "MOVE"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		rt     *Route
		method string
		keys   []string
		dest   string
		want   []admission
	}{
		{"PUT of a member", rt, "PUT", []string{"/dav/c/m"}, "",
			[]admission{{"/dav/", ScopeMember}, {"/dav/c/", ScopeMember}, {"/dav/c/m", ScopeKey}}},
		{"POST of a collection", rt, "POST", []string{"/dav/c"}, "",
			[]admission{{"/dav/", ScopeMember}, {"/dav/c", ScopeKey}}},
		{"DELETE of a collection", rt, "DELETE", []string{"/dav/c"}, "",
			[]admission{{"/dav/", ScopeMember}, {"/dav/c", ScopeKey}, {"/dav/c/", ScopeTree}}},
		{"COPY: its Destination only", rt, "COPY", []string{"/dav/a", "/dav/b"}, "/dav/b",
			[]admission{{"/dav/", ScopeMember}, {"/dav/a", ScopeKey}, {"/dav/b", ScopeKey}, {"/dav/b/", ScopeTree}}},
		{"MOVE into its own collection", rt, "MOVE", []string{"/dav/c", "/dav/c/d"}, "/dav/c/d",
			[]admission{{"/dav/", ScopeMember}, {"/dav/c", ScopeKey}, {"/dav/c/", ScopeTree}, {"/dav/c/d", ScopeKey}, {"/dav/c/d/", ScopeTree}}},
		{"an extension method", rt, "FROB", []string{"/dav/c"}, "",
			[]admission{{"/dav/", ScopeMember}, {"/dav/c", ScopeKey}, {"/dav/c/", ScopeTree}}},
		{"PUT of the root", root, "PUT", []string{"/"}, "", []admission{{"/", ScopeTree}}},
		{"PUT below the root", root, "PUT", []string{"/a"}, "", []admission{{"/", ScopeMember}, {"/a", ScopeKey}}},
		{"hierarchical: false", flat, "DELETE", []string{"/dav/c"}, "", []admission{{"/dav/c", ScopeKey}}},
		// Naming COPY or MOVE keeps the rule of before: every write a tree
		// write, on the collections' own keys.
		{"PUT on a route naming COPY", strict, "PUT", []string{"/dav/c/m"}, "",
			[]admission{{"/dav", ScopeMember}, {"/dav/c", ScopeMember}, {"/dav/c/m", ScopeTree}}},
		{"POST of a collection on a route naming COPY", strict, "POST", []string{"/dav/c"}, "",
			[]admission{{"/dav", ScopeMember}, {"/dav/c", ScopeTree}}},
	} {
		var trees []string
		if TreeMethod(tc.method) {
			trees = append(trees, tc.keys[0])
		}
		if tc.dest != "" {
			trees = append(trees, tc.dest)
		}
		if got := tc.rt.admissions("", tc.keys, trees, admission{}, nil); !slices.Equal(got, tc.want) {
			t.Errorf("%s: admissions %v; want %v", tc.name, got, tc.want)
		}
	}
}
