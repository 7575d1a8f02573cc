package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/server"
	"github.com/fencegate/fencegate/telemetry"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	vconfig "github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
)

var methods = []string{"get", "put", "post", "patch", "delete", "head", "options", "trace"}

// operations returns "METHOD /path" of every operation in doc tagged tag
// ("" for all).
func operations(t *testing.T, doc []byte, tag string) map[string]bool {
	t.Helper()
	var d struct {
		Paths map[string]map[string]struct{ Tags []string }
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for p, item := range d.Paths {
		for m, op := range item {
			if slices.Contains(methods, m) && (tag == "" || slices.Contains(op.Tags, tag)) {
				ops[strings.ToUpper(m)+" "+p] = true
			}
		}
	}
	return ops
}

func newValidator(t *testing.T, doc []byte) validator.Validator {
	t.Helper()
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(d, vconfig.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("openapi.json is not a valid OpenAPI 3.1 document: %s: %s %v", e.Message, e.Reason, e.SchemaValidationErrors)
		}
		t.FailNow()
	}
	return v
}

// startServer runs a gateway, coordinator and admin listener in process on
// the embedded store.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	up := httptest.NewServer(&recorder.Recorder{})
	t.Cleanup(up.Close)
	cfg, err := config.Parse("api.yaml", []byte(fmt.Sprintf(`
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q}
      resource: "{path}"
store:
  embedded: {path: %q}
coordinator: {enabled: true, listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: error}
`, up.URL, filepath.Join(t.TempDir(), "fencegate.db"))))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), cfg, server.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return srv
}

type apiCase struct {
	listener string // coordinator or admin
	method   string
	path     string // with the query
	body     string
	status   int
	op       string // the documented path, if not path without its query
}

// TestOpenAPIAgainstServer sends real requests to each listener of a real
// server and validates every request and answer against the document the
// listener serves itself (libopenapi-validator: schemas with
// additionalProperties false, so an undocumented field in an answer
// fails). Every documented operation must be exercised with a 200 answer,
// and request bodies carry every documented field (the APIs refuse
// unknown fields, so a documented field the code does not read fails).
func TestOpenAPIAgainstServer(t *testing.T) {
	srv := startServer(t)
	base := map[string]string{"coordinator": "http://" + srv.Addr("coordinator"), "admin": "http://" + srv.Addr("admin")}

	cases := []apiCase{
		{"coordinator", "POST", "/v1/leases/acquire", `{"resource":"/orders/7","owner":"w1","ttl":"30s","wait":"1s"}`, 200, ""},
		{"coordinator", "POST", "/v1/leases/acquire", `{"resource":"/orders/7","owner":"w2","ttl":30,"wait":0}`, 409, ""},
		{"coordinator", "POST", "/v1/leases/acquire", `{"resource":"/orders/7","owner":"w1","ttl_ms":3}`, 400, ""},
		{"coordinator", "POST", "/v1/leases/renew", `{"resource":"/orders/7","owner":"w1","token":$TOKEN,"ttl":"1m"}`, 200, ""},
		{"coordinator", "POST", "/v1/leases/renew", `{"resource":"/orders/7","owner":"w2","token":$TOKEN}`, 409, ""},
		{"coordinator", "GET", "/v1/leases?resource=/orders/7", "", 200, ""},
		{"coordinator", "GET", "/v1/leases?resource=/orders/never", "", 200, ""},
		{"coordinator", "GET", "/v1/leases", "", 400, ""},
		{"coordinator", "POST", "/v1/leases/release", `{"resource":"/orders/7","owner":"w1","token":$TOKEN}`, 200, ""},
		{"coordinator", "POST", "/v1/leases/release", `{"resource":"/orders/7","owner":"w1","token":$TOKEN}`, 200, ""},
		{"coordinator", "GET", "/openapi.json", "", 200, ""},
		{"admin", "GET", "/v1/fences?resource=/orders/7", "", 200, ""},
		{"admin", "GET", "/v1/fences?resource=", "", 400, ""},
		{"admin", "POST", "/v1/fences/advance", `{"resource":"/orders/8","token":5,"owner":"ops"}`, 200, ""},
		{"admin", "POST", "/v1/fences/advance", `{"resource":"/orders/8","token":0}`, 400, ""},
		{"admin", "GET", "/v1/fences?resource=/orders/8", "", 200, ""},
		{"admin", "GET", "/v1/fences?prefix=/orders/&limit=1", "", 200, ""},
		{"admin", "GET", "/v1/fences?limit=0", "", 400, ""},
		{"admin", "POST", "/v1/fences/reset", `{"resource":"/orders/8","to":1,"confirm":"/orders/8","owner":"ops"}`, 200, ""},
		{"admin", "POST", "/v1/fences/reset", `{"resource":"/orders/8","to":1,"confirm":"/orders/9"}`, 400, ""},
		{"admin", "GET", "/v1/leases?prefix=/orders/&limit=10", "", 200, ""},
		{"admin", "GET", "/v1/refusals", "", 200, ""},
		{"admin", "GET", "/v1/routes", "", 200, ""},
		{"admin", "GET", "/v1/status", "", 200, ""},
		{"admin", "GET", "/", "", 200, ""},
		{"admin", "GET", "/routes", "", 200, ""},
		{"admin", "GET", "/fences", "", 200, ""},
		{"admin", "GET", "/fence?resource=/orders/8", "", 200, ""},
		{"admin", "GET", "/leases", "", 200, ""},
		{"admin", "GET", "/refusals", "", 200, ""},
		{"admin", "GET", "/console/static/style.css", "", 200, "/console/static/{file}"},
		{"admin", "GET", "/healthz", "", 200, ""},
		{"admin", "GET", "/readyz", "", 200, ""},
		{"admin", "GET", "/metrics", "", 200, ""},
		{"admin", "GET", "/openapi.json", "", 200, ""},
	}

	validators := map[string]validator.Validator{}
	documented := map[string]map[string]bool{}
	for _, l := range api.Listeners {
		served := get(t, base[l]+"/openapi.json")
		if !bytes.Equal(served, api.OpenAPIFor(l)) {
			t.Fatalf("%s listener serves a different /openapi.json", l)
		}
		validators[l] = newValidator(t, served)
		documented[l] = operations(t, served, "")
	}

	exercised := map[string]map[string]bool{"coordinator": {}, "admin": {}}
	var token int64
	for _, c := range cases {
		body := strings.ReplaceAll(c.body, "$TOKEN", strconv.FormatInt(token, 10))
		name := c.listener + " " + c.method + " " + c.path + " " + body
		mk := func() *http.Request {
			req, err := http.NewRequest(c.method, base[c.listener]+c.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			return req
		}
		resp, err := http.DefaultClient.Do(mk())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s; want %d", name, resp.StatusCode, b, c.status)
			continue
		}
		v := validators[c.listener]
		// Requests the API refuses need not match the schema (that is
		// why they are refused); every answer must.
		if c.status < 400 {
			if ok, errs := v.ValidateHttpRequest(mk()); !ok {
				t.Errorf("%s: request does not match the document: %s", name, describe(errs))
			}
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		if ok, errs := v.ValidateHttpResponse(mk(), resp); !ok {
			t.Errorf("%s: answer %d %s does not match the document: %s", name, resp.StatusCode, b, describe(errs))
		}
		op := c.method + " " + strings.SplitN(c.path, "?", 2)[0]
		if c.op != "" {
			op = c.method + " " + c.op
		}
		if !documented[c.listener][op] {
			t.Errorf("%s: %s is not documented for the %s listener", name, op, c.listener)
		}
		if c.status == 200 {
			exercised[c.listener][op] = true
		}
		if strings.HasSuffix(c.path, "/acquire") && c.status == 200 {
			var l coordinator.LeaseResponse
			json.Unmarshal(b, &l)
			token = l.Token
		}
	}
	// Served only by configurations this server does not have: the login
	// form and session with API keys (auth), the cluster view in fence
	// mode shared. TestOpenAPIDocumentsEveryEndpoint sees them served, and
	// the console's browser tests (server.TestConsoleLogin,
	// TestConsoleCluster) exercise them.
	elsewhere := map[string]bool{"admin GET /login": true, "admin POST /login": true, "admin POST /logout": true,
		"admin GET /cluster": true, "admin GET /v1/cluster": true}
	for l, ops := range documented {
		for op := range ops {
			if !exercised[l][op] && !elsewhere[l+" "+op] {
				t.Errorf("%s %s is documented but no case answers it with 200: is it real?", l, op)
			}
		}
	}
}

func describe(errs []*verrors.ValidationError) string {
	var s []string
	for _, e := range errs {
		d := e.Message + ": " + e.Reason
		for _, f := range e.SchemaValidationErrors {
			d += " [" + f.Reason + " at " + f.FieldPath + "]"
		}
		s = append(s, d)
	}
	return strings.Join(s, "; ")
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

// TestOpenAPIDocumentsEveryEndpoint reads the patterns every non-test Go
// file of the module registers on a ServeMux (HandleFunc/Handle with a
// literal "METHOD /path") and requires the document to have exactly those
// operations: those in coordinator/ for the coordinator listener, the
// others for the admin listener. A new endpoint without documentation, or
// a documented one that was removed, fails here.
func TestOpenAPIDocumentsEveryEndpoint(t *testing.T) {
	got := map[string]map[string]bool{"coordinator": {}, "admin": {}}
	root := filepath.Join("..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "testdata", "node_modules", "internal", "e2e", "bench", "tools":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		listener := "admin"
		if strings.HasPrefix(filepath.ToSlash(path), "../coordinator/") {
			listener = "coordinator"
		}
		ast.Inspect(f, func(n ast.Node) bool {
			// Any call whose first argument is a literal "METHOD /path"
			// (mux.Handle, mux.HandleFunc, and helpers wrapping them).
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 1 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			pat, _ := strconv.Unquote(lit.Value)
			method, p, ok := strings.Cut(pat, " ")
			if !ok || !slices.Contains(methods, strings.ToLower(method)) || !strings.HasPrefix(p, "/") {
				return true
			}
			// ServeMux spellings: "/{$}" is exactly "/"; a trailing
			// slash is a subtree, documented as "/dir/{file}".
			switch {
			case strings.HasSuffix(p, "/{$}"):
				p = strings.TrimSuffix(p, "{$}")
			case strings.HasSuffix(p, "/") && p != "/":
				p += "{file}"
			}
			got[listener][method+" "+p] = true
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range api.Listeners {
		doc := operations(t, api.OpenAPIFor(l), l)
		for op := range got[l] {
			if !doc[op] {
				t.Errorf("%s listener: %s is served but not in api/openapi.json (tag %s)", l, op, l)
			}
		}
		for op := range doc {
			if !got[l][op] {
				t.Errorf("%s listener: api/openapi.json documents %s but no code registers it", l, op)
			}
		}
	}
}

// TestOpenAPISchemasMatchTypes compares each schema's properties with the
// JSON fields of the Go type the code encodes or decodes: a field added to
// a type without documentation, or documented without existing, fails.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	type schemas map[string]json.RawMessage
	load := func(l string) schemas {
		var d struct{ Components struct{ Schemas schemas } }
		if err := json.Unmarshal(api.OpenAPIFor(l), &d); err != nil {
			t.Fatal(err)
		}
		return d.Components.Schemas
	}
	props := func(raw json.RawMessage) []string {
		var s struct{ Properties map[string]any }
		json.Unmarshal(raw, &s)
		return slices.Sorted(maps.Keys(s.Properties))
	}
	docs := map[string]schemas{"coordinator": load("coordinator"), "admin": load("admin")}
	for _, c := range []struct {
		listener, schema string
		typ              any
	}{
		{"coordinator", "Lease", coordinator.LeaseResponse{}},
		{"coordinator", "ReleaseResponse", coordinator.ReleaseResponse{}},
		{"coordinator", "AcquireRequest", coordinator.AcquireRequest{}},
		{"coordinator", "RenewRequest", coordinator.RenewRequest{}},
		{"coordinator", "Error", fencegate.Error{}},
		{"admin", "FenceState", fencegate.FenceState{}},
		{"admin", "Error", fencegate.Error{}},
		{"admin", "Lease", console.Lease{}},
		{"admin", "FenceRow", console.FenceRow{}},
		{"admin", "FencePage", console.FencePage{}},
		{"admin", "LeasePage", console.LeasePage{}},
		{"admin", "RefusalPage", console.RefusalPage{}},
		{"admin", "Refusal", telemetry.Refusal{}},
		{"admin", "Route", console.Route{}},
		{"admin", "Status", console.Status{}},
		{"admin", "Reload", console.Reload{}},
		{"admin", "BuildInfo", telemetry.BuildInfo{}},
	} {
		raw, ok := docs[c.listener][c.schema]
		if !ok {
			t.Errorf("%s document has no schema %s", c.listener, c.schema)
			continue
		}
		if got, want := props(raw), jsonFields(reflect.TypeOf(c.typ)); !slices.Equal(got, want) {
			t.Errorf("%s schema %s has %v; %T encodes %v", c.listener, c.schema, got, c.typ, want)
		}
	}
	// Release takes RenewRequest without ttl (refused if given).
	got := props(docs["coordinator"]["ReleaseRequest"])
	want := slices.DeleteFunc(jsonFields(reflect.TypeOf(coordinator.RenewRequest{})), func(s string) bool { return s == "ttl" })
	if !slices.Equal(got, want) {
		t.Errorf("schema ReleaseRequest has %v; want %v", got, want)
	}
	// What both documents describe, they describe alike.
	for name, raw := range docs["coordinator"] {
		if other, ok := docs["admin"][name]; ok && !bytes.Equal(raw, other) {
			t.Errorf("schema %s differs between the coordinator and admin documents", name)
		}
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// encoding/json promotes an embedded struct's fields.
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
