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
	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/server"
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
		{"coordinator", "POST", "/v1/leases/acquire", `{"resource":"/orders/7","owner":"w1","ttl":"30s","wait":"1s"}`, 200},
		{"coordinator", "POST", "/v1/leases/acquire", `{"resource":"/orders/7","owner":"w2","ttl":30,"wait":0}`, 409},
		{"coordinator", "POST", "/v1/leases/acquire", `{"resource":"/orders/7","owner":"w1","ttl_ms":3}`, 400},
		{"coordinator", "POST", "/v1/leases/renew", `{"resource":"/orders/7","owner":"w1","token":$TOKEN,"ttl":"1m"}`, 200},
		{"coordinator", "POST", "/v1/leases/renew", `{"resource":"/orders/7","owner":"w2","token":$TOKEN}`, 409},
		{"coordinator", "GET", "/v1/leases?resource=/orders/7", "", 200},
		{"coordinator", "GET", "/v1/leases?resource=/orders/never", "", 200},
		{"coordinator", "GET", "/v1/leases", "", 400},
		{"coordinator", "POST", "/v1/leases/release", `{"resource":"/orders/7","owner":"w1","token":$TOKEN}`, 200},
		{"coordinator", "POST", "/v1/leases/release", `{"resource":"/orders/7","owner":"w1","token":$TOKEN}`, 200},
		{"coordinator", "GET", "/openapi.json", "", 200},
		{"admin", "GET", "/v1/fences?resource=/orders/7", "", 200},
		{"admin", "GET", "/v1/fences", "", 400},
		{"admin", "POST", "/v1/fences/advance", `{"resource":"/orders/8","token":5,"owner":"ops"}`, 200},
		{"admin", "POST", "/v1/fences/advance", `{"resource":"/orders/8","token":0}`, 400},
		{"admin", "GET", "/v1/fences?resource=/orders/8", "", 200},
		{"admin", "GET", "/healthz", "", 200},
		{"admin", "GET", "/readyz", "", 200},
		{"admin", "GET", "/metrics", "", 200},
		{"admin", "GET", "/openapi.json", "", 200},
	}

	validators := map[string]validator.Validator{}
	documented := map[string]map[string]bool{}
	for _, l := range []string{"coordinator", "admin"} {
		served := get(t, base[l]+"/openapi.json")
		if !bytes.Equal(served, api.OpenAPIFor(l)) {
			t.Fatalf("%s listener serves a different /openapi.json", l)
		}
		validators[l] = newValidator(t, served)
		documented[l] = operations(t, served, "")
		if want := operations(t, api.OpenAPI, l); !maps.Equal(documented[l], want) {
			t.Fatalf("%s listener's document has %v; want the operations tagged %s: %v", l, documented[l], l, want)
		}
	}
	newValidator(t, api.OpenAPI)

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
	for l, ops := range documented {
		for op := range ops {
			if !exercised[l][op] {
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
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			pat, _ := strconv.Unquote(lit.Value)
			if pat == "/" {
				return true // the coordinator's JSON 404
			}
			method, p, ok := strings.Cut(pat, " ")
			if !ok {
				t.Errorf("%s: pattern %q has no method: document it per method", path, pat)
				return true
			}
			got[listener][method+" "+p] = true
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"coordinator", "admin"} {
		doc := operations(t, api.OpenAPI, l)
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
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any
			}
		}
	}
	if err := json.Unmarshal(api.OpenAPI, &d); err != nil {
		t.Fatal(err)
	}
	for schema, typ := range map[string]any{
		"Lease":           coordinator.LeaseResponse{},
		"ReleaseResponse": coordinator.ReleaseResponse{},
		"AcquireRequest":  coordinator.AcquireRequest{},
		"RenewRequest":    coordinator.RenewRequest{},
		"FenceState":      fencegate.FenceState{},
		"Error":           fencegate.Error{},
	} {
		got := slices.Sorted(maps.Keys(d.Components.Schemas[schema].Properties))
		want := jsonFields(reflect.TypeOf(typ))
		if !slices.Equal(got, want) {
			t.Errorf("schema %s has %v; %T encodes %v", schema, got, typ, want)
		}
	}
	// Release takes RenewRequest without ttl (refused if given).
	got := slices.Sorted(maps.Keys(d.Components.Schemas["ReleaseRequest"].Properties))
	want := slices.DeleteFunc(jsonFields(reflect.TypeOf(coordinator.RenewRequest{})), func(s string) bool { return s == "ttl" })
	if !slices.Equal(got, want) {
		t.Errorf("schema ReleaseRequest has %v; want %v", got, want)
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
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
