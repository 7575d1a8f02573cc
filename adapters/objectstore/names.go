package objectstore

import "strings"

// The spellings of object names that the stores, their emulators or a
// filesystem backend read as another name: a name has one spelling, one
// object, one fence key (docs/security.md).

// BadByte is the first control character or backslash in s, which a
// store or its filesystem backend may read another way; ok false if there
// is none.
func BadByte(s string) (c byte, ok bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return c, true
		}
	}
	return 0, false
}

// BadSegment is the first segment of the "/"-separated name that a store
// resolves or drops: "" (a leading, trailing or double "/"), "." or "..";
// ok false if there is none.
func BadSegment(name string) (seg string, ok bool) {
	for rest, more := name, true; more; {
		var s string
		s, rest, more = strings.Cut(rest, "/")
		if s == "" || s == "." || s == ".." {
			return s, true
		}
	}
	return "", false
}
