package objectstore

import "testing"

func TestBadNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seg     string
		badSeg  bool
		char    byte
		badChar bool
	}{
		{name: "dir/job"},
		{name: "a b/ü"},
		{name: "", badSeg: true},
		{name: "/x", badSeg: true},
		{name: "x/", badSeg: true},
		{name: "a//b", badSeg: true},
		{name: "a/./b", seg: ".", badSeg: true},
		{name: "../beta/x", seg: "..", badSeg: true},
		{name: `a\b`, char: '\\', badChar: true},
		{name: "a\x00b", char: 0, badChar: true},
		{name: "a\x7f", char: 0x7f, badChar: true},
		{name: "a\nb/..", seg: "..", badSeg: true, char: '\n', badChar: true},
	} {
		if s, bad := BadSegment(tc.name); bad != tc.badSeg || s != tc.seg {
			t.Errorf("BadSegment(%q) = %q, %v; want %q, %v", tc.name, s, bad, tc.seg, tc.badSeg)
		}
		if c, bad := BadByte(tc.name); bad != tc.badChar || c != tc.char {
			t.Errorf("BadByte(%q) = %q, %v; want %q, %v", tc.name, c, bad, tc.char, tc.badChar)
		}
	}
}
