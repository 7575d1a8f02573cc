package resource

import (
	"slices"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		in   string
		want string // JoinPath of the result; "ERR" for a refusal
	}{
		{"/orders/7", "/orders/7"},
		{"/orders//7", "/orders/7"},
		{"//orders/7", "/orders/7"},
		{"/orders/./7", "/orders/7"},
		{"/./orders/7/.", "/orders/7"},
		{"/orders/%37", "/orders/7"},
		{"/%6Frders/7", "/orders/7"},
		{"/orders/%2e/7", "/orders/7"},
		{"/orders/a%20b", "/orders/a%20b"},
		{"/orders/a b", "/orders/a%20b"},
		{"/orders/%E2%82%AC", "/orders/%E2%82%AC"},
		{"/", "/"},
		{"/orders/../admin", "ERR"},
		{"/orders/%2e%2e/admin", "ERR"},
		{"/orders/.%2E/admin", "ERR"},
		{"/orders/..", "ERR"},
		{"/orders%2F7", "ERR"},
		{"/orders/7%2f", "ERR"},
		{"/orders\\7", "ERR"},
		{"/orders/%5C7", "ERR"},
		{"/orders/%00", "ERR"},
		{"/orders/%0a", "ERR"},
		{"/orders/%zz", "ERR"},
		{"/orders/%", "ERR"},
		{"orders/7", "ERR"},
	}
	for _, tt := range tests {
		segs, err := CleanPath(tt.in)
		got := "ERR"
		if err == nil {
			got = JoinPath(segs, false)
		}
		if got != tt.want {
			t.Errorf("CleanPath(%q) = %q (%v); want %q", tt.in, got, err, tt.want)
		}
	}
}

// FuzzCleanPath checks the property the fence relies on: the canonical form
// is a fixed point, so every spelling that is accepted maps to exactly one
// key, and nothing that decodes to a traversal is accepted.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/a/b", "/a//b", "/a/./b", "/a/%2e%2e/b", "/%41", "/a%2Fb", "/a/b/",
		// Encoded separators and their double encodings.
		"/a%5Cb", "/a%252Fb", "/%252e%252e/b", "/a/%2E/b", "/a%00b", "/a;b=1/c", "/a/%C0%AE%C0%AE/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		segs, err := CleanPath(s)
		if err != nil {
			return
		}
		canon := JoinPath(segs, false)
		again, err := CleanPath(canon)
		if err != nil {
			t.Fatalf("canonical %q of %q refused: %v", canon, s, err)
		}
		if !slices.Equal(segs, again) {
			t.Fatalf("CleanPath not idempotent: %q -> %q -> %q", s, segs, again)
		}
		for _, seg := range segs {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/\\\x00") {
				t.Fatalf("CleanPath(%q) produced segment %q", s, seg)
			}
		}
	})
}

func TestTemplate(t *testing.T) {
	vars := map[string]string{
		"path": "/orders/7", "path.1": "orders", "path.2": "7", "host": "api.example.com",
		"header.X-Tenant": "acme", "bucket": "invoices", "key": "2026/11.pdf",
	}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	known := func(name string) bool { return name == "bucket" || name == "key" }
	tests := []struct {
		tmpl, want, err string
	}{
		{"{path}", "/orders/7", ""},
		{"{path.2}", "7", ""},
		{"order:{path.2}", "order:7", ""},
		{"{host}{path}", "api.example.com/orders/7", ""},
		{"{header.X-Tenant}/{path}", "acme//orders/7", ""},
		{"{bucket}/{key}", "invoices/2026/11.pdf", ""},
		{"{bucket}", "invoices", ""},
		{"{path.3}", "", "missing"},
		{"{path.0}", "", "numbered from 1"},
		{"{nope}", "", "unknown variable"},
		{"{path", "", "unclosed"},
		{"path}", "", "unmatched"},
		{"", "", "empty"},
		{"{header.}", "", "missing header name"},
	}
	for _, tt := range tests {
		tm, err := ParseTemplate(tt.tmpl, known)
		var got string
		if err == nil {
			got, err = tm.Expand(lookup)
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("template %q: err %v; want %q", tt.tmpl, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("template %q = %q, %v; want %q", tt.tmpl, got, err, tt.want)
		}
	}
}
