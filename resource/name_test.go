package resource

import "testing"

func TestCanonicalName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/orders/22", "/orders/22"},
		{"/orders//22", "/orders/22"},
		{"//orders/./22", "/orders/22"},
		{"/orders//22/", "/orders/22"},
		{"/orders/%32%32", "/orders/22"},
		{"/orders/a b", "/orders/a%20b"},
		{"photos/a.jpg", "photos/a.jpg"},
		{"bucket//k", "bucket//k"},
		{"tenant:acme/orders", "tenant:acme/orders"},
	} {
		got, err := CanonicalName(c.in)
		if err != nil || got != c.want {
			t.Errorf("CanonicalName(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"/orders/../admin", "/orders/%2e%2e/x", "/a%2Fb", "/a\\b", "/a\x00", "/a%00", "/a%zz", "b/../k", "..", "x\ny", "x\x7f"} {
		if got, err := CanonicalName(bad); err == nil {
			t.Errorf("CanonicalName(%q) = %q; want an error", bad, got)
		}
	}
}
