package resource

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// ParseQuery accepts only a query every store reads alike (issue 41 item
// 4: a name in another case, a name twice in any case, an empty condition
// value were each read one way by the gateway and another by a store).
func TestParseQuery(t *testing.T) {
	params := map[string]ParamRule{"comp": ParamText, "ifGenerationMatch": ParamInteger, "uploads": ParamFlag}
	rules := &QueryRules{Params: params}
	other := &QueryRules{Params: params, OtherNames: true}
	encoded := &QueryRules{Params: params, EncodedNames: true}
	for _, tc := range []struct {
		raw     string
		rules   *QueryRules
		want    string // the names parsed, joined by ","; "!" refused
		unknown bool   // refused as an unknown name
	}{
		{"", rules, "", false},
		{"comp=block", rules, "comp", false},
		{"comp=block%6Cist", rules, "comp", false},
		{"uploads", rules, "uploads", false},
		{"uploads=", rules, "uploads", false},
		{"ifGenerationMatch=0&comp=x", rules, "ifGenerationMatch,comp", false},
		{"frob=1", other, "frob", false},
		{"%63omp=x", encoded, "comp", false},

		{"Comp=block", rules, "!", false},                 // another case
		{"IFGENERATIONMATCH=1", other, "!", false},        // another case, other names accepted
		{"comp=a&comp=b", rules, "!", false},              // twice
		{"comp=a&COMP=b", rules, "!", false},              // twice, in another case
		{"frob=1&FROB=2", other, "!", false},              // an unknown name twice
		{"\u212aey=1&key=2", other, "!", false},           // Kelvin sign folds to k
		{"comp=", rules, "!", false},                      // empty value
		{"ifGenerationMatch=", rules, "!", false},         // an empty condition
		{"ifGenerationMatch=-1", rules, "!", false},       // not decimal digits
		{"comp=a;b", rules, "!", false},                   // ';'
		{"comp=a&&uploads", rules, "!", false},            // empty pair
		{"comp=a&", rules, "!", false},                    // empty pair
		{"comp=%zz", rules, "!", false},                   // bad encoding
		{"=x", other, "!", false},                         // no name
		{"%63omp=x", rules, "!", false},                   // encoded name
		{"frob=1", rules, "!", true},                      // unknown
		{"frob=", other, "frob", false},                   // another name: the dialect's to judge
		{"uploads&comp=x&Uploads", rules, "!", false},     // twice, flag
		{"comp=x&ifgenerationmatch=1", other, "!", false}, // another case
	} {
		q, err := ParseQuery(tc.raw, tc.rules)
		var names []string
		for _, p := range q {
			names = append(names, p.Name)
		}
		got := strings.Join(names, ",")
		if err != nil {
			got = "!"
		}
		if got != tc.want {
			t.Errorf("ParseQuery(%q) = %q (%v); want %q", tc.raw, got, err, tc.want)
		}
		var qe *QueryError
		if err != nil && (!errors.As(err, &qe) || qe.Unknown != tc.unknown) {
			t.Errorf("ParseQuery(%q): error %#v; want a QueryError with Unknown %v", tc.raw, err, tc.unknown)
		}
	}
}

func TestQueryGet(t *testing.T) {
	q, err := ParseQuery("comp=block&uploads", &QueryRules{Params: map[string]ParamRule{"comp": ParamText, "uploads": ParamFlag}})
	if err != nil {
		t.Fatal(err)
	}
	if q.Get("comp") != "block" || !q.Has("uploads") || q.Has("Comp") || q.Get("x") != "" {
		t.Errorf("Get/Has of %v wrong", q)
	}
}

func TestFoldName(t *testing.T) {
	for _, tc := range [][2]string{{"Comp", "cOMP"}, {"\u212a", "k"}, {"\u017f", "S"}, {"blockId", "BLOCKID"}, {"Ä", "ä"}} {
		if FoldName(tc[0]) != FoldName(tc[1]) {
			t.Errorf("FoldName(%q) = %q, FoldName(%q) = %q; want equal", tc[0], FoldName(tc[0]), tc[1], FoldName(tc[1]))
		}
	}
	if FoldName("comp") == FoldName("cmop") {
		t.Error("different names fold alike")
	}
}

func FuzzFoldName(f *testing.F) {
	f.Add("Comp", "COMP")
	f.Add("\u212aey", "key")
	f.Fuzz(func(t *testing.T, a, b string) {
		if (FoldName(a) == FoldName(b)) != strings.EqualFold(a, b) {
			t.Errorf("FoldName(%q) = %q, FoldName(%q) = %q; EqualFold %v", a, FoldName(a), b, FoldName(b), strings.EqualFold(a, b))
		}
	})
}

// What ParseQuery accepts, every reader reads alike: net/url gives the
// same pairs, fasthttp-style splitting on '&' the same count, and no two
// names fold alike.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"comp=block", "Comp=a&comp=b", "a=1&&b", "x;y", "%63omp=1", "uploads", "k=%zz", "\u212a=1&k=2"} {
		f.Add(s)
	}
	rules := &QueryRules{Params: map[string]ParamRule{"comp": ParamText, "uploads": ParamFlag, "n": ParamInteger}, OtherNames: true, EncodedNames: true}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := ParseQuery(raw, rules)
		if err != nil {
			return
		}
		std, serr := url.ParseQuery(raw)
		if serr != nil {
			t.Fatalf("ParseQuery accepted %q, which net/url refuses: %v", raw, serr)
		}
		if raw != "" && len(q) != strings.Count(raw, "&")+1 {
			t.Fatalf("%q: %d pairs parsed, %d by '&'", raw, len(q), strings.Count(raw, "&")+1)
		}
		seen := map[string]bool{}
		for _, p := range q {
			if vs := std[p.Name]; len(vs) != 1 || vs[0] != p.Value {
				t.Fatalf("%q: %s=%q; net/url reads %q", raw, p.Name, p.Value, vs)
			}
			fk := FoldName(p.Name)
			if seen[fk] {
				t.Fatalf("%q: %s twice in some case", raw, p.Name)
			}
			seen[fk] = true
		}
	})
}
