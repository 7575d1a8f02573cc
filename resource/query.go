package resource

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"unicode"
)

// A write's query string names what the store does: the operation (S3's
// sub-resources, Azure's comp and restype, GCS's uploadType), its
// conditions (ifGenerationMatch) and sometimes the object (GCS's name).
// Stores and their emulators read a query in different ways: one folds
// the case of names and another does not, one keeps the first of a name
// sent twice and another the last (or an array that matches no
// operation), one drops a pair net/url refuses and another keeps it, one
// reads an empty condition as none and another as a condition. Where two
// readings can differ the gateway would fence one operation while the
// store runs another, so every object-store dialect reads a write's query
// with ParseQuery, which accepts only a query every reader reads alike.

// ParamRule is how a store reads the value of one query parameter.
type ParamRule uint8

const (
	// ParamText takes any value but the empty one: an empty value is
	// no value for one reader and a value for another (an empty
	// ifGenerationMatch= is the worker's condition or none).
	ParamText ParamRule = iota
	// ParamInteger takes decimal digits (a generation, a byte count).
	ParamInteger
	// ParamFlag is a sub-resource whose name is the point: its value may
	// be empty (S3's ?uploads, ?tagging).
	ParamFlag
)

// QueryRules are how one store reads a write's query: the parameter names
// it knows, each spelled as it spells it.
type QueryRules struct {
	// Params are the names a write may carry, in the store's spelling,
	// with the rule of each value.
	Params map[string]ParamRule
	// OtherNames accepts names outside Params, with any value, for a
	// dialect that judges them itself (S3: a query that names no
	// operation of its table is refused as one; a read's parameters).
	// A name of Params in another case is refused all the same.
	OtherNames bool
	// EncodedNames reads a percent-encoded name as its decoded form.
	// False refuses it: a store that dispatches on the decoded name and
	// verifies signatures on the encoded one (Azurite) reads two names.
	EncodedNames bool

	once   sync.Once
	folded map[string]string // FoldName of each of Params, to its spelling
}

// foldedParams maps each name of Params, folded, to its spelling: made
// once per rules, not per request.
func (rules *QueryRules) foldedParams() map[string]string {
	rules.once.Do(func() {
		rules.folded = make(map[string]string, len(rules.Params))
		for n := range rules.Params {
			rules.folded[FoldName(n)] = n
		}
	})
	return rules.folded
}

// Param is one query parameter as sent.
type Param struct {
	Name  string // decoded
	Value string // decoded
	Raw   string // the name as sent
}

// Query is a write's query parameters in the order sent, each name once.
type Query []Param

// Get is the value of the parameter spelled name ("" if absent).
func (q Query) Get(name string) string {
	v, _ := q.Lookup(name)
	return v
}

// Has reports whether the parameter spelled name was sent.
func (q Query) Has(name string) bool {
	_, ok := q.Lookup(name)
	return ok
}

// Lookup is the value of the parameter spelled name, and whether it was
// sent.
func (q Query) Lookup(name string) (string, bool) {
	for _, p := range q {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// QueryError is ParseQuery's refusal: the parameter (if one) and why.
type QueryError struct {
	// Name is the parameter refused, decoded; "" for the query as a whole.
	Name string
	// Unknown: the name is neither in the rules nor another spelling of
	// one (a dialect may answer it as an operation it does not know).
	Unknown bool
	msg     string
}

func (e *QueryError) Error() string { return e.msg }

func queryErr(name string, format string, args ...any) *QueryError {
	return &QueryError{Name: name, msg: fmt.Sprintf(format, args...)}
}

// ParseQuery reads a write's query string raw as every store reads it
// alike, or refuses it (a *QueryError): pairs separated by '&', none empty
// and none with a ';' (net/url drops such a pair, other parsers keep it);
// valid percent-encoding in names and values; a name in every pair; each
// name once, compared without regard to case (Unicode simple folding: a
// store that folds case reads "Comp" and "COMP" as one name, one that does
// not as two); a known name only in its own spelling; no value empty but
// a flag's, an integer's in decimal digits.
func ParseQuery(raw string, rules *QueryRules) (Query, error) {
	var q Query
	if raw == "" {
		return q, nil
	}
	folded := rules.foldedParams()
	seen := make(map[string]bool)
	for rest, more := raw, true; more; {
		var pair string
		pair, rest, more = strings.Cut(rest, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			return nil, queryErr("", "the query string has an empty pair or a ';', which stores read differently")
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || name == "" {
			return nil, queryErr("", "the query string has a parameter without a valid name")
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, queryErr(name, "the query parameter %s has invalid percent-encoding", QuoteName(name))
		}
		fk := FoldName(name)
		if seen[fk] {
			return nil, queryErr(name, "the query parameter %s is sent more than once (in some case): stores read such a query differently", QuoteName(name))
		}
		seen[fk] = true
		rule, known := rules.Params[name]
		switch want := folded[fk]; {
		case !known && want != "":
			return nil, queryErr(name, "the query parameter %s must be spelled %s: stores read a name in another case differently", QuoteName(name), want)
		case !known && !rules.OtherNames:
			e := queryErr(name, "the query parameter %s is not accepted on a write through the gateway", QuoteName(name))
			e.Unknown = true
			return nil, e
		case k != name && !rules.EncodedNames:
			return nil, queryErr(name, "the query parameter %s must be sent without percent-encoding in its name", QuoteName(name))
		case value == "" && rule != ParamFlag && known:
			return nil, queryErr(name, "the query parameter %s has no value: leave it out or give its value", QuoteName(name))
		case rule == ParamInteger && strings.Trim(value, "0123456789") != "":
			return nil, queryErr(name, "the query parameter %s must be a decimal number", QuoteName(name))
		}
		q = append(q, Param{Name: name, Value: value, Raw: k})
	}
	return q, nil
}

// FoldName is s with each rune replaced by the least rune of its simple
// case-folding orbit: FoldName(a) == FoldName(b) exactly when
// strings.EqualFold(a, b) (invalid UTF-8 reads as U+FFFD in both).
func FoldName(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || c == 'k' || c == 'K' || c == 's' || c == 'S' {
			// k and s share their orbits with the Kelvin sign and the long s.
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// QuoteName quotes a parameter name for a message, bounded in length.
func QuoteName(n string) string {
	if len(n) > 64 {
		n = n[:64] + "..."
	}
	return `"` + strings.ToValidUTF8(n, "?") + `"`
}
