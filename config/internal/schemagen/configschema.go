// Package schemagen generates api/config.schema.json, the JSON Schema
// of fencegate's YAML configuration, from the config structs: field names
// from their yaml tags, descriptions from their doc comments, and the
// keywords a comment cannot carry (enum, default, required) from their
// jsonschema tags. It reads the comments from the config package's source,
// so it runs at `go generate` time, not in the binary, which embeds the
// result.
package schemagen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/invopop/jsonschema"
)

// ID is the schema's $id; editors and the tests resolve it.
const ID = "https://github.com/fencegate/fencegate/api/config.schema.json"

// Command is what regenerates the committed file (from the repository root),
// with the toolchain running it: go.mod's, the one place the version is kept.
var Command = "GOTOOLCHAIN=" + runtime.Version() + " go generate ./config"

const rootDescription = "The YAML file of `fencegate serve -c FILE` (README, Configuration). " +
	"Decoded strictly: unknown fields are errors. `${NAME}` is replaced by the environment variable " +
	"NAME before decoding, so any field may hold one. Print this schema with `fencegate config schema`."

// envPattern is config's ${NAME} reference (config/env.go).
const envPattern = `\$\{[A-Za-z_][A-Za-z0-9_]*\}`

// durationMarker stands for a time.Duration between reflection and the
// rewrite to a $ref: the reflector applies a string's tags (default) to it.
const durationMarker = "fencegate-duration"

// signedExtra is the jsonschema_extras key of an integer field that takes
// negative values; every other integer is at least 0.
const signedExtra = "signed"

// Generate returns the schema of config.Config, indented, ending in a
// newline. configDir is the config package's source directory, whose doc
// comments become the descriptions.
func Generate(configDir string) ([]byte, error) {
	docs, err := readDocs(configDir)
	if err != nil {
		return nil, err
	}
	durationType := reflect.TypeFor[time.Duration]()
	r := &jsonschema.Reflector{
		FieldNameTag:               "yaml",
		RequiredFromJSONSchemaTags: true,
		ExpandedStruct:             true,
		Anonymous:                  true,
		Namer:                      func(t reflect.Type) string { return snake(t.Name()) },
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == durationType {
				return &jsonschema.Schema{Type: "string", Format: durationMarker}
			}
			return nil
		},
		LookupComment: func(t reflect.Type, field string) string {
			if field == "" {
				return docs[t.Name()]
			}
			return fieldDoc(docs[t.Name()+"."+field], t, field)
		},
	}
	s := r.Reflect(&config.Config{})
	s.Version = "https://json-schema.org/draft/2020-12/schema"
	s.ID = ID
	s.Title = "fencegate configuration"
	s.Description = rootDescription
	s.Definitions["env"] = &jsonschema.Schema{
		Type:        "string",
		Pattern:     "^" + envPattern + "$",
		Description: "An environment variable reference, replaced before decoding.",
	}
	s.Definitions["duration"] = &jsonschema.Schema{
		Type:        "string",
		Pattern:     `^(-?([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+|0|` + envPattern + `)$`,
		Description: "A duration: 30s, 1m, 250ms, 1h30m.",
	}
	if err := rewrite(s); err != nil {
		return nil, err
	}
	for _, d := range s.Definitions {
		if err := rewrite(d); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// rewrite turns the reflector's scalars into what config decodes: a
// duration string (or ${NAME}) for a time.Duration, and for an integer or
// a boolean also a ${NAME} reference, since the file is YAML where
// `port: ${PORT}` is a string until the environment is expanded.
func rewrite(s *jsonschema.Schema) error {
	if s == nil {
		return nil
	}
	env := &jsonschema.Schema{Ref: "#/$defs/env"}
	switch {
	case s.Format == durationMarker:
		s.Type, s.Format, s.Ref = "", "", "#/$defs/duration"
	case s.Type == "integer":
		inner := &jsonschema.Schema{Type: "integer", Minimum: s.Minimum, Maximum: s.Maximum}
		if s.Extras[signedExtra] == nil && inner.Minimum == "" {
			inner.Minimum = "0"
		}
		delete(s.Extras, signedExtra)
		if len(s.Extras) == 0 {
			s.Extras = nil
		}
		s.Type, s.Minimum, s.Maximum = "", "", ""
		s.AnyOf = []*jsonschema.Schema{inner, env}
	case s.Type == "boolean":
		s.Type = ""
		s.AnyOf = []*jsonschema.Schema{{Type: "boolean"}, env}
	}
	if len(s.Extras) > 0 {
		return fmt.Errorf("unknown jsonschema_extras %v", s.Extras)
	}
	if s.Properties != nil {
		for p := s.Properties.Oldest(); p != nil; p = p.Next() {
			if err := rewrite(p.Value); err != nil {
				return fmt.Errorf("%s: %w", p.Key, err)
			}
		}
	}
	if err := rewrite(s.Items); err != nil {
		return err
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties != jsonschema.FalseSchema {
		return rewrite(s.AdditionalProperties)
	}
	return nil
}

// readDocs reads the doc comments of the exported types of dir's Go files
// (tests left out) and of their fields: "Type" and "Type.Field". A field
// without a doc comment takes its line comment.
func readDocs(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				docs[ts.Name.Name] = typeDoc(doc.Text(), ts.Name.Name)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				prev := ""
				for _, f := range st.Fields.List {
					text := f.Doc.Text()
					if text == "" {
						text = f.Comment.Text()
					}
					if text == "" && len(f.Names) == 1 && strings.Contains(prev, " "+f.Names[0].Name+" ") {
						// "CertFile and KeyFile are ...": one comment for both.
						text = prev
					}
					prev = text
					for _, n := range f.Names {
						docs[ts.Name.Name+"."+n.Name] = oneLine(text)
					}
				}
			}
		}
	}
	return docs, nil
}

// typeDoc is a type's doc comment as a description: "Route maps ..."
// becomes "Maps ...".
func typeDoc(text, name string) string {
	text = oneLine(text)
	rest, ok := strings.CutPrefix(text, name+" ")
	if !ok {
		rest, ok = strings.CutPrefix(text, name+": ")
	}
	if ok {
		rest = strings.TrimPrefix(rest, "is ")
		if rest != "" {
			text = strings.ToUpper(rest[:1]) + rest[1:]
		}
	}
	return text
}

// fieldDoc is a field's doc comment as a description. Go names fields in
// their comments; the file names them by their YAML keys, so the field
// itself (leading the comment) and its struct's other fields named by
// compound names (StampHeader, KeyFile) are replaced by their keys.
func fieldDoc(text string, t reflect.Type, field string) string {
	key := func(goName string) string {
		f, ok := t.FieldByName(goName)
		if !ok {
			return ""
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		return name
	}
	if rest, ok := strings.CutPrefix(text, field); ok && (rest == "" || rest[0] == ' ' || rest[0] == ',') {
		text = "`" + key(field) + "`" + rest
	}
	return goIdent.ReplaceAllStringFunc(text, func(w string) string {
		if k := key(w); k != "" && k != "-" {
			return "`" + k + "`"
		}
		return w
	})
}

// goIdent is a compound Go identifier: two capitals or more.
var goIdent = regexp.MustCompile(`\b[A-Z][a-z0-9]*[A-Z][A-Za-z0-9]*\b`)

var spaces = regexp.MustCompile(`\s+`)

func oneLine(s string) string { return strings.TrimSpace(spaces.ReplaceAllString(s, " ")) }

// snake names a $defs entry: TokenSource is token_source.
func snake(name string) string {
	var b strings.Builder
	for i, c := range name {
		if c >= 'A' && c <= 'Z' {
			if i > 0 && !(i > 0 && name[i-1] >= 'A' && name[i-1] <= 'Z') {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
