package config_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// upstream.h2c is HTTP/2 over cleartext: for an http:// url only.
func TestUpstreamH2C(t *testing.T) {
	for _, tc := range []struct{ url, wantErr string }{
		{"http://127.0.0.1:9000", ""},
		{"https://store.internal", "upstream.h2c: is HTTP/2 over cleartext, for an http:// url"},
	} {
		yaml := `gateway:
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: "` + tc.url + `", h2c: true}
      resource: "{path}"
`
		c, err := config.Parse("t.yaml", []byte(yaml))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.wantErr == "" && !c.Gateway.Routes[0].Upstream.H2C:
			t.Errorf("%s: h2c not set", tc.url)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.url, err, tc.wantErr)
		}
	}
}
