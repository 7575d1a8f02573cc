package config_test

import (
	"testing"

	"github.com/fencegate/fencegate/config"
)

// RedactURL (doctor's and the console's address lines) keeps scheme, host
// and path and drops what may be a secret.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://svc:s3cr3t@api.internal:8443/v1/?token=s3cr3t#frag": "https://api.internal:8443/v1/",
		"http://127.0.0.1:9000": "http://127.0.0.1:9000",
		"http://user@host/":     "http://host/",
		"http://[::1":           "(unparsable address)",
	} {
		if got := config.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
