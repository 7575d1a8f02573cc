package resource

import "testing"

func TestExpandPrefix(t *testing.T) {
	s3vars := func(name string) bool { return name == "bucket" || name == "key" || name == "key.2" }
	for _, tc := range []struct {
		tmpl string
		vars map[string]string
		want string
		ok   bool
	}{
		{"{bucket}/{key}", map[string]string{"bucket": "b"}, "b", true},
		{"s3:{bucket}/{key.2}", map[string]string{"bucket": "b"}, "s3:b", true},
		{"t/{bucket}/x/{key}", map[string]string{"bucket": "b"}, "t/b/x", true},
		{"{bucket}/{key}", map[string]string{"bucket": "b", "key": "k"}, "", false}, // a member
		{"{bucket}", map[string]string{"bucket": "b"}, "", false},
		{"{bucket}-{key}", map[string]string{"bucket": "b"}, "", false}, // no level between them
		{"{key}", map[string]string{"bucket": "b"}, "", false},
		{"x/{key}", map[string]string{"bucket": "b"}, "", false}, // no variable of the collection
		{"{bucket}/{key}", map[string]string{"bucket": "a/b"}, "a/b", true},
		{"{bucket}{key}", map[string]string{"bucket": "a/b"}, "", false}, // the '/' is the value's, not a level
	} {
		tm, err := ParseTemplate(tc.tmpl, s3vars)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := tm.ExpandPrefix(func(n string) (string, bool) { v, ok := tc.vars[n]; return v, ok })
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s %v: got %q %v; want %q %v", tc.tmpl, tc.vars, got, ok, tc.want, tc.ok)
		}
	}
}
