package config

import (
	"strings"
	"testing"
)

func TestMethodValidation(t *testing.T) {
	route := func(extra string) string {
		return `
gateway:
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: http://127.0.0.1:9000}
      resource: "{path}"
` + extra
	}
	tests := []struct {
		name, yaml string
		want       string // substring of the error; "" means valid
	}{
		{"legacy narrow list", route("      fenced_methods: [PUT, POST, PATCH, DELETE]\n"), ""},
		{"lower case in the file is folded", route("      fenced_methods: [put, Post]\n"), ""},
		{"webdav names", route("      fenced_methods: [MOVE, COPY, PROPPATCH, MKCOL, LOCK, MERGE]\n"), ""},
		{"typo", route("      fenced_methods: [PUTT, POST]\n"),
			"bad.yaml:8: gateway.routes[0].fenced_methods[0]: unknown method PUTT"},
		{"read", route("      fenced_methods: [GET]\n"),
			"bad.yaml:8: gateway.routes[0].fenced_methods[0]: GET is a read"},
		{"read among writes", route("      fenced_methods:\n        - PUT\n        - HEAD\n"),
			"bad.yaml:10: gateway.routes[0].fenced_methods[1]: HEAD is a read"},
		{"undeclared extension", route("      fenced_methods: [FOO]\n"), "unknown method FOO (declare extension methods"},
		{"declared extension", route("      extension_methods: [FOO]\n      fenced_methods: [PUT, FOO]\n"), ""},
		{"declared registered method", route("      extension_methods: [MOVE]\n"), "MOVE is a registered method"},
		{"not a token", route("      extension_methods: [\"A B\"]\n"), "is not a valid HTTP method name"},
		{"match unknown", strings.Replace(route(""), "{path_prefix: /orders/}", "{path_prefix: /orders/, methods: [PUTT]}", 1),
			"gateway.routes[0].match.methods[0]: unknown method PUTT"},
		{"match known", strings.Replace(route(""), "{path_prefix: /orders/}", "{path_prefix: /orders/, methods: [get, PUT]}", 1), ""},
		{"host without match.host", strings.Replace(route(""), `"{path}"`, `"{host}{path}"`, 1),
			"bad.yaml:7: gateway.routes[0].resource: {host} needs match.host"},
		{"host pinned", strings.Replace(strings.Replace(route(""), `"{path}"`, `"{host}{path}"`, 1),
			"{path_prefix: /orders/}", "{host: A.example., path_prefix: /orders/}", 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v; want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}
