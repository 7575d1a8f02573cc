package httprefusal_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/httprefusal"
)

// codes are the values of the refusal codes the root package declares
// (every const named Code...), read from its source so that a new code
// cannot be added without a status.
func codes(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../fencegate.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Code") {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, _ := strconv.Unquote(lit.Value)
			out[v] = vs.Names[0].Name
		}
		return true
	})
	if len(out) < 20 {
		t.Fatalf("found %d codes in fencegate.go; the parse missed them", len(out))
	}
	return out
}

// TestEveryCodeHasAStatus: each code fencegate declares is answered with
// a status of its own; only internal_error is a 500.
func TestEveryCodeHasAStatus(t *testing.T) {
	for code, name := range codes(t) {
		st := httprefusal.Status(&fencegate.Error{Code: code})
		if (st == http.StatusInternalServerError) != (code == fencegate.CodeInternal) {
			t.Errorf("%s (%s) is answered %d", name, code, st)
		}
	}
	if st := httprefusal.Status(&fencegate.Error{Code: "never_declared"}); st != http.StatusInternalServerError {
		t.Errorf("an unknown code is answered %d; want 500", st)
	}
}

// TestStatusAsDocumented: the status of each code is the one the error
// tables of the docs give it (a public contract).
func TestStatusAsDocumented(t *testing.T) {
	known := codes(t)
	type row struct{ file, code, status string }
	var rows []row
	for _, d := range []struct {
		file string
		re   *regexp.Regexp
		code int // submatch of the code; the status is the other one
	}{
		{"../docs/configuration.md", regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]{3}) \\|"), 1},
		{"../docs/coordinator.md", regexp.MustCompile("(?m)^\\| ([0-9]{3}) \\| `([a-z_]+)` \\|"), 2},
		{"../docs/design.md", regexp.MustCompile("`([a-z_]+)` ([0-9]{3})\\b"), 1},
	} {
		b, err := os.ReadFile(d.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range d.re.FindAllStringSubmatch(string(b), -1) {
			r := row{file: d.file, code: m[d.code], status: m[3-d.code]}
			if _, ok := known[r.code]; ok {
				rows = append(rows, r)
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.code] = true
		if got := strconv.Itoa(httprefusal.Status(&fencegate.Error{Code: r.code})); got != r.status {
			t.Errorf("%s says %s is %s; answered %s", r.file, r.code, r.status, got)
		}
	}
	if len(seen) < 20 {
		t.Errorf("the docs' error tables name %d codes: %v; the patterns no longer match them", len(seen), seen)
	}
}

// TestWithStatus: an edge's pinned status answers the refusal, keeps its
// cause, and counts only on the refusal it was pinned to, not on one that
// wraps it.
func TestWithStatus(t *testing.T) {
	cause := fencegate.ErrResetNotPositive
	e := httprefusal.WithStatus(http.StatusNotImplemented, &fencegate.Error{Code: fencegate.CodeInvalidRequest, Err: cause})
	if st := httprefusal.Status(e); st != http.StatusNotImplemented {
		t.Errorf("pinned status: %d; want 501", st)
	}
	if e.Err == nil || !strings.Contains(e.Error(), cause.Error()) {
		t.Errorf("the cause is lost from the log text: %q", e.Error())
	}
	if !errors.Is(e, cause) {
		t.Error("errors.Is no longer finds the cause")
	}
	bare := &fencegate.Error{Code: fencegate.CodeInvalidRequest, Message: "m"}
	if want, got := bare.Error(), httprefusal.WithStatus(http.StatusNotFound, bare).Error(); got != want {
		t.Errorf("a pinned status changed the error's text: %q; want %q", got, want)
	}
	outer := fencegate.Unavailable("/r", e)
	if st := httprefusal.Status(outer); st != http.StatusServiceUnavailable {
		t.Errorf("a refusal wrapping a pinned one: %d; want its own 503", st)
	}
}

// TestRetryAfter: a retry hint is whole seconds, never shorter than the
// hint.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, ""}, {-time.Second, ""}, {time.Nanosecond, "1"}, {time.Second, "1"},
		{time.Second + time.Nanosecond, "2"}, {1500 * time.Millisecond, "2"}, {5 * time.Second, "5"},
	} {
		if got := httprefusal.RetryAfter(tc.d); got != tc.want {
			t.Errorf("RetryAfter(%v) = %q; want %q", tc.d, got, tc.want)
		}
	}
}
