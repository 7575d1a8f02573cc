package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Environment references are expanded in parsed scalar values only: the file is parsed first and ${NAME} is substituted into
// the value of each scalar that holds it, so a value can never become YAML
// syntax (a quote, a bracket, " #", a newline of a PEM block all land in
// that one field) and a reference in a comment is never looked up.
//
// To let a bare ${NAME} stand in a flow collection ({a: ${X}}), where YAML
// would read its braces as syntax, the references are first rewritten to a
// marker of the same length in characters, "$" U+E000 NAME U+E001, which is
// plain-scalar text everywhere (and still a comment inside a comment), so
// line and column numbers stay those of the file.
const (
	markOpen  = '\uE000'
	markClose = '\uE001'
)

var (
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
	// unmark turns markers back into the ${NAME} the operator wrote, for
	// every message and source excerpt.
	unmark = strings.NewReplacer(string(markOpen), "{", string(markClose), "}")
)

// source is where a parsed configuration came from: the file's name, its
// syntax tree (positions are the file's) and every value taken from the
// environment. Parse keeps it on the Config so that later messages can
// point at file:line and name ${NAME} instead of printing the value.
type source struct {
	name string
	file *ast.File
	env  []envValue
}

// envValue is one scalar whose value came (partly) from the environment.
type envValue struct {
	path  string // field path, e.g. store.postgres.url
	line  int
	ref   string   // the scalar as written, e.g. postgres://app:${DB_PASSWORD}@db/app
	value string   // the expanded value: never printed
	empty []string // variables set to ""
}

// markRefs rewrites ${NAME} to its marker; $$ is left for the value pass.
func markRefs(data []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(data))
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c != '$' || i+1 >= len(data) {
			b.WriteByte(c)
			continue
		}
		switch data[i+1] {
		case '$':
			b.WriteString("$$")
			i++
			continue
		case '{':
			if n := envName.Find(data[i+2:]); n != nil && i+2+len(n) < len(data) && data[i+2+len(n)] == '}' {
				b.WriteByte('$')
				b.WriteRune(markOpen)
				b.Write(n)
				b.WriteRune(markClose)
				i += 2 + len(n)
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.Bytes()
}

// expandValue expands the markers and $$ of one scalar value. It returns
// the names of unset variables instead of expanding them.
func expandValue(s string) (out string, used bool, unset, empty []string) {
	if !strings.Contains(s, "$") {
		return s, false, nil, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if r, w := utf8.DecodeRuneInString(s[i+1:]); r == markOpen {
			if end := strings.IndexRune(s[i+1+w:], markClose); end >= 0 {
				name := s[i+1+w : i+1+w+end]
				v, ok := os.LookupEnv(name)
				if !ok {
					unset = append(unset, name)
				} else if v == "" {
					empty = append(empty, name)
				}
				b.WriteString(v)
				used = true
				i += w + end + utf8.RuneLen(markClose)
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String(), used, unset, empty
}

// parseSource parses data and expands the environment into its values. It
// returns the document body (nil for an empty file).
func parseSource(name string, data []byte) (*source, ast.Node, error) {
	if bytes.ContainsRune(data, markOpen) || bytes.ContainsRune(data, markClose) {
		return nil, nil, &FieldError{File: name, Msg: "the file contains U+E000 or U+E001, which fencegate reserves for ${NAME} references"}
	}
	f, err := parser.ParseBytes(markRefs(data), 0)
	if err != nil {
		return nil, nil, newDecodeError(&source{name: name}, err)
	}
	src := &source{name: name, file: f}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return src, nil, nil
	}
	if len(f.Docs) > 1 {
		return nil, nil, &FieldError{File: name, Line: f.Docs[1].GetToken().Position.Line, Msg: "one YAML document per file"}
	}
	var errs Errors
	body := src.expand(f.Docs[0].Body, &errs)
	if len(errs) > 0 {
		return nil, nil, errs
	}
	f.Docs[0].Body = body
	return src, body, nil
}

// expand walks values (never keys) and returns n with the environment
// expanded; a plain scalar is typed again from its expanded text (so
// `enabled: ${ON}` is a bool), a quoted or block one stays a string.
func (src *source) expand(n ast.Node, errs *Errors) ast.Node {
	switch n := n.(type) {
	case *ast.MappingNode:
		for _, mv := range n.Values {
			src.expand(mv, errs)
		}
	case *ast.MappingValueNode:
		if k := n.Key.GetToken(); k != nil && strings.ContainsRune(k.Value, markOpen) {
			*errs = append(*errs, &FieldError{File: src.name, Line: k.Position.Line, Field: fieldPath(n),
				Msg: fmt.Sprintf("%s: environment variables are expanded in values, not in keys", unmark.Replace(k.Value))})
		}
		n.Value = src.expand(n.Value, errs)
	case *ast.SequenceNode:
		for i, v := range n.Values {
			n.Values[i] = src.expand(v, errs)
		}
	case *ast.AnchorNode:
		n.Value = src.expand(n.Value, errs)
	case *ast.TagNode:
		n.Value = src.expand(n.Value, errs)
	case *ast.LiteralNode:
		if v, ok := src.expandScalar(n, n.Value.Value, errs); ok {
			n.Value.Value = v
		}
	case *ast.StringNode:
		v, ok := src.expandScalar(n, n.Value, errs)
		if !ok {
			break
		}
		tk := n.GetToken()
		if tk.Type != token.StringType {
			n.Value = v // quoted: a string whatever it holds
			break
		}
		nt := token.New(v, tk.Origin, tk.Position)
		nt.Prev, nt.Next = tk.Prev, tk.Next
		var typed ast.Node
		switch nt.Type {
		case token.BoolType:
			typed = ast.Bool(nt)
		case token.IntegerType, token.BinaryIntegerType, token.OctetIntegerType, token.HexIntegerType:
			typed = ast.Integer(nt)
		case token.FloatType:
			typed = ast.Float(nt)
		case token.NullType:
			typed = ast.Null(nt)
		default:
			nt.Type = token.StringType
			typed = ast.String(nt)
		}
		typed.SetPath(n.GetPath())
		return typed
	}
	return n
}

// expandScalar expands one scalar's value; ok is false when nothing
// changed.
func (src *source) expandScalar(n ast.Node, s string, errs *Errors) (string, bool) {
	v, used, unset, empty := expandValue(s)
	line := n.GetToken().Position.Line
	if lit, ok := n.(*ast.LiteralNode); ok {
		line = lit.Start.Position.Line
	}
	for _, name := range unset {
		*errs = append(*errs, &FieldError{File: src.name, Line: line, Field: fieldPath(n),
			Msg: fmt.Sprintf("environment variable ${%s} is not set", name)})
	}
	if used {
		src.env = append(src.env, envValue{path: fieldPath(n), line: line, ref: unmark.Replace(s), value: v, empty: empty})
	}
	return v, v != s
}

func fieldPath(n ast.Node) string {
	return strings.TrimPrefix(strings.TrimPrefix(n.GetPath(), "$"), ".")
}

// envAt is the environment-sourced value at a position, if any.
func (src *source) envAt(line int, path string) (envValue, bool) {
	if src == nil {
		return envValue{}, false
	}
	for _, e := range src.env {
		if e.line == line && (path == "" || e.path == path) {
			return e, true
		}
	}
	return envValue{}, false
}

// redact replaces every environment value in msg by the scalar as written.
// Values of the field (or beneath it) are replaced wherever they appear;
// others only quoted or when long enough not to be an ordinary word.
func (src *source) redact(msg, field string) string {
	if src == nil {
		return msg
	}
	// References already in msg, and values replaced, become numbered
	// stand-ins first, so that no replacement reaches into a reference.
	stand := func(i int) string { return "\x00" + strings.Repeat("\x01", i+1) + "\x00" }
	for i, e := range src.env {
		msg = strings.ReplaceAll(msg, e.ref, stand(i))
	}
	for i, e := range src.env {
		if e.value == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, strconv.Quote(e.value), stand(i))
		if len(e.value) >= 4 || (field != "" && strings.HasPrefix(e.path, field)) {
			msg = strings.ReplaceAll(msg, e.value, stand(i))
		}
	}
	for i, e := range src.env {
		msg = strings.ReplaceAll(msg, stand(i), e.ref)
	}
	return msg
}

// Redact returns err with every value the configuration took from the
// environment replaced by its ${NAME} reference, for errors produced after
// parsing (building routes, opening the store) that may quote a value.
// errors.Is and errors.As still see err.
func (c *Config) Redact(err error) error {
	if err == nil || c == nil || c.src == nil || len(c.src.env) == 0 {
		return err
	}
	msg := c.src.redact(err.Error(), "")
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// RedactURL drops what may be a secret from an address for a message: user
// info, query and fragment.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable address)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// DecodeError is a YAML syntax, type or unknown-field error.
type DecodeError struct {
	File string
	Line int
	Err  error
	msg  string
}

func (e *DecodeError) Error() string { return e.msg }
func (e *DecodeError) Unwrap() error { return e.Err }

var lineCol = regexp.MustCompile(`^\[(\d+):(\d+)\]`)

// newDecodeError formats a goccy error as file:line:col: message, with the
// source excerpt. An error on a value from the environment names the
// reference instead of the value and quotes no source.
func newDecodeError(src *source, err error) *DecodeError {
	d := &DecodeError{File: src.name, Err: err}
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		tk := ye.GetToken()
		d.Line = tk.Position.Line
		if e, ok := src.envAt(tk.Position.Line, ""); ok && strings.ContainsRune(tk.Origin, markOpen) {
			what := "does not fit this field"
			var te *yaml.TypeError
			var ue *yaml.UnexpectedNodeTypeError
			switch {
			case errors.As(err, &te):
				what = "is not a " + kindName(te.DstType)
			case errors.As(err, &ue):
				what = "is not a " + ue.Expected.YAMLName()
			}
			d.msg = fmt.Sprintf("%s:%d:%d: %s: %s from the environment %s", src.name, d.Line, tk.Position.Column, e.path, e.ref, what)
			return d
		}
	}
	msg := unmark.Replace(yaml.FormatError(err, false, true))
	if m := lineCol.FindStringSubmatch(msg); m != nil {
		d.msg = fmt.Sprintf("%s:%s:%s: %s", src.name, m[1], m[2], strings.TrimSpace(msg[len(m[0]):]))
	} else {
		d.msg = src.name + ": " + msg
	}
	return d
}

// kindName names a Go type the way an operator writes its values.
func kindName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration (30s, 1m, 250ms)"
	case t.Kind() == reflect.Bool:
		return "boolean (true or false)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "whole number"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Slice:
		return "list"
	case t.Kind() == reflect.Map, t.Kind() == reflect.Struct:
		return "mapping"
	case t.Kind() == reflect.Pointer:
		return kindName(t.Elem())
	}
	return t.String()
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkScalars checks every scalar against the Go type of its field before
// decoding, so that a bad duration, number or boolean is reported with its
// field path, its line and a message in the file's terms (the decoder
// would name a Go type, and for durations no line), and a value from the
// environment is named by its reference, never printed.
func (src *source) checkScalars(n ast.Node, t reflect.Type, errs *Errors) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		src.checkScalars(v.Value, t, errs)
		return
	case *ast.TagNode:
		src.checkScalars(v.Value, t, errs)
		return
	case *ast.AliasNode, nil:
		return
	case *ast.MappingNode:
		for _, mv := range v.Values {
			src.checkScalars(mv, t, errs)
		}
		return
	case *ast.MappingValueNode:
		switch t.Kind() {
		case reflect.Map:
			src.checkScalars(v.Value, t.Elem(), errs)
		case reflect.Struct:
			if f, ok := fieldByTag(t, v.Key.GetToken().Value); ok {
				src.checkScalars(v.Value, f.Type, errs)
			}
		}
		return
	case *ast.SequenceNode:
		if t.Kind() == reflect.Slice {
			for _, item := range v.Values {
				src.checkScalars(item, t.Elem(), errs)
			}
		}
		return
	case *ast.NullNode:
		return
	}
	if msg := scalarProblem(n, t); msg != "" {
		tk := n.GetToken()
		what := ""
		if tk.Type == token.StringType || tk.Type == token.DoubleQuoteType || tk.Type == token.SingleQuoteType {
			what = strconv.Quote(tk.Value) + " "
		}
		if e, ok := src.envAt(tk.Position.Line, fieldPath(n)); ok {
			what = e.ref + " from the environment "
		}
		*errs = append(*errs, &FieldError{File: src.name, Line: tk.Position.Line, Field: fieldPath(n), Msg: what + msg})
	}
}

// scalarProblem is what is wrong with scalar n as a value of type t, or "".
func scalarProblem(n ast.Node, t reflect.Type) string {
	switch {
	case t == durationType:
		s, ok := n.(*ast.StringNode)
		if !ok {
			return "needs a unit: write a duration such as 30s, 1m or 250ms"
		}
		if _, err := time.ParseDuration(s.Value); err != nil {
			return "is not a duration: write it such as 30s, 1m or 250ms"
		}
	case t.Kind() == reflect.Bool:
		if _, ok := n.(*ast.BoolNode); !ok {
			return "must be true or false"
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		bits := t.Bits()
		var ok bool
		switch v := n.(type) {
		case *ast.IntegerNode:
			switch x := v.Value.(type) {
			case int64:
				ok = bits == 64 || (x >= -1<<(bits-1) && x < 1<<(bits-1))
			case uint64:
				ok = x <= math.MaxInt64>>(64-bits)
			}
		case *ast.StringNode:
			_, err := strconv.ParseInt(v.Value, 10, bits)
			ok = err == nil
		}
		if !ok {
			return fmt.Sprintf("must be a whole number between %d and %d", int64(-1)<<(bits-1), int64(math.MaxInt64>>(64-bits)))
		}
	case t.Kind() == reflect.String:
		switch n.(type) {
		case *ast.MappingNode, *ast.SequenceNode:
			return "must be a string"
		}
	}
	return ""
}

// fieldByTag finds the struct field decoded from YAML key name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == name && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
