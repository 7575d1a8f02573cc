package config

import (
	"strings"
	"testing"
	"time"
)

// The object-store sections are read from one registry: each route's
// section gives its kind, endpoint, template variables, default timeout
// and precondition, whatever the dialect.
func TestObjectStoreSections(t *testing.T) {
	const routes = `
gateway:
  routes:
    - name: s3
      match: {host: s3.internal}
      s3: {endpoint: http://127.0.0.1:7070, clients: [{access_key_id: w, secret_access_key: s}]}
      resource: "{bucket}/{key.1}"
    - name: gcs
      match: {host: gcs.internal}
      gcs: {no_auth: true}
      auth: {api_keys: [{owner: w, sha256: "` + "0000000000000000000000000000000000000000000000000000000000000000" + `"}]}
      resource: "{bucket}/{object}"
`
	cfg, err := Parse("stores.yaml", []byte(routes))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ kind, endpoint, v string }{
		{"s3", "http://127.0.0.1:7070", "key.1"},
		{"gcs", GCSDefaultEndpoint, "object"},
	} {
		r := &cfg.Gateway.Routes[i]
		s := r.ObjectStore()
		if s == nil || s.Kind() != want.kind || s.StoreEndpoint() != want.endpoint || !r.TemplateVar(want.v) || r.TemplateVar("path") {
			t.Errorf("route %d: section %v", i, s)
			continue
		}
		if r.UpstreamTimeout() != 30*time.Second {
			t.Errorf("route %s: timeout %v; want the default", r.Name, r.UpstreamTimeout())
		}
	}
	if got := ObjectStoreKinds(); strings.Join(got, ",") != "s3,gcs,azure" {
		t.Errorf("kinds %v", got)
	}
	// A precondition the store does not compare is refused, by the
	// section's word for it.
	for kind, yaml := range map[string]string{
		"s3":  strings.Replace(routes, `resource: "{bucket}/{key.1}"`, "resource: \"{bucket}/{key}\"\n      precondition: generation", 1),
		"gcs": strings.Replace(routes, `resource: "{bucket}/{object}"`, "resource: \"{bucket}/{object}\"\n      precondition: etag", 1),
	} {
		_, err := Parse("stores.yaml", []byte(yaml))
		if err == nil || !strings.Contains(err.Error(), "a "+kind+" route compares") {
			t.Errorf("%s route with another store's precondition: %v", kind, err)
		}
	}
}
