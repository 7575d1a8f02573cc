package resource

import (
	"slices"
	"strings"
	"testing"
)

func TestParents(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{"/dav/coll/m", []string{"/", "/dav", "/dav/coll"}},
		{"/dav/coll/", []string{"/", "/dav"}},
		{"/dav", []string{"/"}},
		{"/", nil},
		{"bucket", nil},
		{"bucket/a/b", []string{"bucket", "bucket/a"}},
	} {
		got := Parents(tc.key)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Parents(%q) = %q; want %q", tc.key, got, tc.want)
		}
		for _, p := range got {
			if !strings.HasPrefix(tc.key, MemberPrefix(p)) {
				t.Errorf("%q is a parent of %q but not below MemberPrefix %q", p, tc.key, MemberPrefix(p))
			}
		}
	}
}
