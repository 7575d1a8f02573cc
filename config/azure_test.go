package config

import (
	"strings"
	"testing"
)

// An azure route needs the gateway's own credentials and the workers'
// own, distinct from the store account's; stamps, lease_guard and
// precondition etag need a key naming one blob.
func TestValidateAzure(t *testing.T) {
	const key = "a2V5LTAxMjM0NTY3ODk="
	route := func(azure, extra string) string {
		return `gateway:
  routes:
    - name: blobs
      match: {path_prefix: /}
      azure:
        endpoint: http://127.0.0.1:10000/devstoreaccount1
` + azure + `      resource: "{container}/{blob}"
` + extra
	}
	creds := "        account_name: devstoreaccount1\n        account_key: " + key + "\n"
	clients := "        clients: [{account_name: worker1, account_key: " + key + "}]\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"valid", route(creds+clients, "      precondition: etag\n"), ""},
		{"valid with sas", route("        sas: \"sv=2021-12-02&sig=abc\"\n"+clients, ""), ""},
		{"no gateway credentials", route(clients, ""), "azure: the gateway's own credentials are required"},
		{"key and sas", route(creds+"        sas: \"sig=abc\"\n"+clients, ""), "set account_key or sas, not both"},
		{"no clients", route(creds, ""), "azure.clients: an azure route needs the workers' own"},
		{"client is the store account", route(creds+"        clients: [{account_name: devstoreaccount1, account_key: "+key+"}]\n", ""), "must differ from the store account's name"},
		{"client key not base64", route(creds+"        clients: [{account_name: w, account_key: \"not base64!\"}]\n", ""), "account_key: required, base64"},
		{"lease_guard without secret", route(creds+clients+"        lease_guard: true\n", ""), "lease_guard needs a secret"},
		{"stamp key", route(creds+clients+"        stamp_key: fencing-token\n", ""), "must be a metadata name"},
		{"etag on a container key", strings.Replace(route(creds+clients, "      precondition: etag\n"), `"{container}/{blob}"`, `"{container}"`, 1), "need a resource naming one blob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tc.yaml))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v; want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error with %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), key) {
				t.Fatalf("the error names a key: %v", err)
			}
		})
	}
}
