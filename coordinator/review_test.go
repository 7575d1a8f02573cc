package coordinator_test

import "testing"

// TestTokenMinusOne: -1 is the validator's "no token in this request"
// sentinel; a client's token -1 on renew or release is not a positive
// token and must be invalid_request like any other, not slip through to
// the store as a lookup.
func TestTokenMinusOne(t *testing.T) {
	e := newAPI(t)
	for _, path := range []string{"/v1/leases/renew", "/v1/leases/release"} {
		st, m, _ := e.do(t, path, `{"resource":"r","owner":"o","token":-1}`)
		if st != 400 || m["error"] != "invalid_request" {
			t.Errorf("%s with token -1 = %d %v; want 400 invalid_request", path, st, m)
		}
	}
}
