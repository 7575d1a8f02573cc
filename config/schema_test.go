package config_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/config/internal/schemagen"
	"github.com/goccy/go-yaml"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles config.schema.json with santhosh-tekuri/jsonschema
// (which checks it against the 2020-12 meta-schema first).
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.ConfigSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const url = "https://github.com/fencegate/fencegate/api/config.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("config.schema.json: %v", err)
	}
	return s
}

// TestConfigSchemaIsGenerated: config.schema.json is what the config
// structs generate. A field added, renamed or documented anew without
// regenerating fails here with the command that regenerates it.
func TestConfigSchemaIsGenerated(t *testing.T) {
	want, err := schemagen.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(api.ConfigSchema, want) {
		return
	}
	got := strings.Split(string(api.ConfigSchema), "\n")
	lines := strings.Split(string(want), "\n")
	i := 0
	for i < len(got) && i < len(lines) && got[i] == lines[i] {
		i++
	}
	line := func(l []string) string {
		if i < len(l) {
			return strings.TrimSpace(l[i])
		}
		return "(end of file)"
	}
	t.Fatalf("api/config.schema.json is not what the config structs generate; regenerate it from the repository root with\n\t%s\n"+
		"first difference at line %d: committed %s; generated %s", schemagen.Command, i+1, line(got), line(lines))
}

// envRef is config's ${NAME} reference.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// yamlInstance turns YAML into the JSON value the schema validates. As
// fencegate does, it replaces ${NAME} before decoding (in flow style a raw
// ${NAME} is not even YAML), here by a placeholder string.
func yamlInstance(t *testing.T, name string, src []byte) any {
	t.Helper()
	src = envRef.ReplaceAll(src, []byte("env-$1"))
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// TestConfigSchemaValidatesRepositoryConfigs validates every fencegate
// configuration in configs/ and deploy/ (files, and the fencegate.yaml of
// Kubernetes ConfigMaps) against the schema. Other YAML there (Kubernetes
// objects, compose, Prometheus rules) is recognised and left out; a file
// that is none of these is taken as a configuration, which must carry the
// yaml-language-server line naming the schema.
func TestConfigSchemaValidatesRepositoryConfigs(t *testing.T) {
	s := compileSchema(t)
	n := 0
	for _, dir := range []string{"../configs", "../deploy"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == "helm" {
				// A Helm chart's templates are not YAML until rendered;
				// TestHelmChart validates the configuration they render.
				return filepath.SkipDir
			}
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var top map[string]any
			if err := yaml.Unmarshal(envRef.ReplaceAll(src, []byte("env-$1")), &top); err != nil {
				t.Errorf("%s: %v", path, err)
				return nil
			}
			switch {
			case top["kind"] == "ConfigMap":
				data, _ := top["data"].(map[string]any)
				for k, v := range data {
					if strings.HasSuffix(k, ".yaml") {
						n++
						if err := s.Validate(yamlInstance(t, path+":"+k, []byte(v.(string)))); err != nil {
							t.Errorf("%s: %s: %v", path, k, err)
						}
					}
				}
				return nil
			case top["apiVersion"] != nil, top["groups"] != nil, top["services"] != nil, top["resources"] != nil:
				return nil // Kubernetes, Prometheus rules, compose, kustomize
			}
			n++
			if !bytes.Contains(src, []byte("# yaml-language-server: $schema=")) || !bytes.Contains(src, []byte("api/config.schema.json")) {
				t.Errorf("%s: no `# yaml-language-server: $schema=.../api/config.schema.json` line", path)
			}
			if err := s.Validate(yamlInstance(t, path, src)); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 5 {
		t.Fatalf("validated %d configurations; the walk is broken", n)
	}
}

// TestConfigSchemaFieldsMatchStructs walks the config structs by their
// yaml tags and the schema by its properties (through $ref) and requires
// the same set of field paths, each duration field typed as a duration. A
// field added to config without the schema, or to the schema without
// config, fails here.
func TestConfigSchemaFieldsMatchStructs(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(api.ConfigSchema, &root); err != nil {
		t.Fatal(err)
	}
	defs, _ := root["$defs"].(map[string]any)
	resolve := func(n map[string]any) map[string]any {
		for {
			r, ok := n["$ref"].(string)
			if !ok {
				return n
			}
			n = defs[strings.TrimPrefix(r, "#/$defs/")].(map[string]any)
		}
	}
	schemaFields := map[string]string{} // path -> kind: object, array, duration, other
	var walkSchema func(prefix string, n map[string]any)
	walkSchema = func(prefix string, n map[string]any) {
		raw := n
		n = resolve(n)
		if items, ok := n["items"].(map[string]any); ok && n["type"] == "array" {
			if props := resolve(items)["properties"]; props != nil {
				schemaFields[prefix] = "array"
				walkSchema(prefix+"[]", items)
				return
			}
		}
		props, ok := n["properties"].(map[string]any)
		if !ok {
			kind := "other"
			if raw["$ref"] == "#/$defs/duration" {
				kind = "duration"
			}
			schemaFields[prefix] = kind
			return
		}
		if prefix != "" {
			schemaFields[prefix] = "object"
		}
		for k, v := range props {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walkSchema(p, v.(map[string]any))
		}
	}
	walkSchema("", root)

	structFields := map[string]string{}
	durationType := reflect.TypeOf(time.Duration(0))
	var walkType func(prefix string, typ reflect.Type)
	walkType = func(prefix string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		switch {
		case typ == durationType:
			structFields[prefix] = "duration"
			return
		case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct:
			structFields[prefix] = "array"
			walkType(prefix+"[]", typ.Elem())
			return
		case typ.Kind() != reflect.Struct:
			structFields[prefix] = "other"
			return
		}
		if prefix != "" {
			structFields[prefix] = "object"
		}
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if opts == "inline" {
				walkType(prefix, f.Type) // fields at this level
				continue
			}
			if name == "" {
				t.Errorf("config field %s.%s has no yaml tag", typ.Name(), f.Name)
				continue
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			walkType(p, f.Type)
		}
	}
	walkType("", reflect.TypeOf(config.Config{}))

	for _, p := range slices.Sorted(maps.Keys(structFields)) {
		sk, ok := schemaFields[p]
		switch {
		case !ok:
			t.Errorf("config field %s is not in api/config.schema.json", p)
		case sk != structFields[p]:
			t.Errorf("config field %s is a %s in the structs and a %s in the schema", p, structFields[p], sk)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(schemaFields)) {
		if _, ok := structFields[p]; !ok {
			t.Errorf("api/config.schema.json has %s, which no config struct has", p)
		}
	}
}

// TestConfigSchemaRefusesWhatConfigRefuses: mistakes the schema reports in
// an editor are mistakes fencegate refuses too, and the good file is
// accepted by both.
func TestConfigSchemaRefusesWhatConfigRefuses(t *testing.T) {
	s := compileSchema(t)
	const good = `
gateway:
  listen: 127.0.0.1:8080
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: "http://127.0.0.1:9000", timeout: 30s}
      resource: "{path}"
store:
  embedded: {path: ./data/fencegate.db}
fence: {mode: local}
coordinator: {enabled: true, default_ttl: 1m30s, max_ttl: 10m}
log: {level: info}
`
	if err := s.Validate(yamlInstance(t, "good", []byte(good))); err != nil {
		t.Fatalf("schema refuses the good file: %v", err)
	}
	if _, err := config.Parse("good", []byte(good)); err != nil {
		t.Fatalf("config refuses the good file: %v", err)
	}
	for name, bad := range map[string]string{
		"unknown field":       strings.Replace(good, "listen: 127.0.0.1:8080", "listen: 127.0.0.1:8080\n  lisen: x", 1),
		"misspelt section":    good + "coordinatr: {}\n",
		"duration as integer": strings.Replace(good, "timeout: 30s", "timeout: 30", 1),
		"bad duration":        strings.Replace(good, "default_ttl: 1m30s", "default_ttl: 90 seconds", 1),
		"bad enum":            strings.Replace(good, "mode: local", "mode: clustered", 1),
		"bad log level":       strings.Replace(good, "level: info", "level: loud", 1),
		"wrong type":          strings.Replace(good, "enabled: true", "enabled: [yes]", 1),
		"route without name":  strings.Replace(good, "- name: orders\n     ", "-", 1),
	} {
		if bad == good {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if err := s.Validate(yamlInstance(t, name, []byte(bad))); err == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
		if _, err := config.Parse(name, []byte(bad)); err == nil {
			t.Errorf("%s: config accepts it (the schema is stricter than the code)", name)
		}
	}
}
