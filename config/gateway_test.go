package config_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// TestTokenHeaderAndTimeouts: a token header the server or proxy consumes
// (Host, Content-Length, a hop-by-hop field), an S3-signed X-Amz-* field, a
// method override the gateway refuses, or an invalid name would lock every
// fenced write out or read the token from something that is not one; a
// negative listener timeout meant no timeout at all (slowloris). Each is a
// validation error naming the field; a plain custom name is fine.
func TestTokenHeaderAndTimeouts(t *testing.T) {
	const routes = "  routes:\n    - {name: o, match: {path_prefix: /o/}, upstream: {url: \"http://127.0.0.1:1\"}, resource: \"{path}\"}\n"
	for _, tc := range []struct{ gateway, field string }{
		{"  token_header: Host\n", "gateway.token_header"},
		{"  token_header: content-length\n", "gateway.token_header"},
		{"  token_header: Transfer-Encoding\n", "gateway.token_header"},
		{"  token_header: Connection\n", "gateway.token_header"},
		{"  token_header: te\n", "gateway.token_header"},
		{"  token_header: Upgrade\n", "gateway.token_header"},
		{"  token_header: Authorization\n", "gateway.token_header"},
		{"  token_header: X-HTTP-Method-Override\n", "gateway.token_header"},
		{"  token_header: X-Forwarded-For\n", "gateway.token_header"},
		{"  token_header: x-amz-date\n", "gateway.token_header"},
		{"  token_header: \"Fencing Token\"\n", "gateway.token_header"},
		{"  token_header: \"Fencing-Token:\"\n", "gateway.token_header"},
		{"  read_header_timeout: -1s\n", "gateway.read_header_timeout"},
		{"  idle_timeout: -1s\n", "gateway.idle_timeout"},
		{"  shutdown_timeout: -1ns\n", "gateway.shutdown_timeout"},
	} {
		_, err := config.Parse("t.yaml", []byte("gateway:\n"+tc.gateway+routes))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: got %v, want an error on %s", strings.TrimSpace(tc.gateway), err, tc.field)
		}
	}
	c, err := config.Parse("t.yaml", []byte("gateway:\n  token_header: X-Lease-Token\n  read_header_timeout: 0s\n"+routes))
	if err != nil {
		t.Fatalf("a custom token header and a zero timeout: %v", err)
	}
	if c.Gateway.TokenHeader != "X-Lease-Token" || c.Gateway.ReadHeaderTimeout != config.DefaultReadHeaderTimeout {
		t.Errorf("token header %q, read_header_timeout %v", c.Gateway.TokenHeader, c.Gateway.ReadHeaderTimeout)
	}
}
