package config_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator"
)

// TestCoordinatorMaxWait: the lease service reads a max_wait of zero or
// below as its default (1m), so the coordinator listener's write timeout
// must leave room for that wait: with max_wait: 0s it was 30s, and an
// acquire that waited 40s for a lease got it (token issued, fence raised)
// and lost its answer; with a negative max_wait the listener had no write
// timeout at all. A negative max_wait is refused.
func TestCoordinatorMaxWait(t *testing.T) {
	const base = "gateway:\n  routes:\n    - {name: o, match: {path_prefix: /o/}, upstream: {url: \"http://127.0.0.1:1\"}, resource: \"{path}\"}\n"
	c, err := config.Parse("t.yaml", []byte(base+"coordinator: {enabled: true, max_wait: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if wt := c.Coordinator.WriteTimeout(); wt < coordinator.DefaultMaxWait+coordinator.AnswerMargin {
		t.Errorf("max_wait 0s: write timeout %v, below the default wait the service allows (%v) plus the answer margin", wt, coordinator.DefaultMaxWait)
	}
	if _, err := config.Parse("t.yaml", []byte(base+"coordinator: {enabled: true, max_wait: -5m}\n")); err == nil {
		t.Error("max_wait -5m accepted")
	}
}

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
