package gateway

import (
	"net/http"
	"strings"

	"github.com/fencegate/fencegate"
)

// Authenticator tells who sends a request on a route that requires
// credentials (package auth implements it from the config's auth block).
type Authenticator interface {
	// Authenticate returns the sender's identity. A *fencegate.Error
	// refuses the request with its status (401 unauthorized); any other
	// error is an internal error.
	Authenticate(r *http.Request) (Identity, error)
}

// Identity is an authenticated sender.
type Identity struct {
	// Owner names the sender in logs, spans and fence records.
	Owner string
	// Prefixes, if set, are the only resource key prefixes the sender may
	// write; nil allows every resource.
	Prefixes []string
	// Credential is the request header that carried the credential, if
	// any. It was meant for the gateway, so it is not forwarded upstream.
	Credential string
	// BindOwner, on the coordinator and admin APIs, limits the owner a
	// request may name (a lease's owner) to Owner itself or Owner/...
	// The gateway's own routes take the owner from Owner anyway.
	BindOwner bool
}

// Allows reports whether id may write resource.
func (id Identity) Allows(resource string) bool {
	if id.Prefixes == nil {
		return true
	}
	for _, p := range id.Prefixes {
		if strings.HasPrefix(resource, p) {
			return true
		}
	}
	return false
}

// authenticate runs the route's Authenticator, if any, and returns the
// request to go on with: without the consumed credential header, so the
// worker's own Authorization never reaches the upstream.
func (g *Gateway) authenticate(r *http.Request, rt *Route, o *Outcome) (*http.Request, Identity, *fencegate.Error) {
	if rt.Auth == nil {
		return r, Identity{}, nil
	}
	id, err := rt.Auth.Authenticate(r)
	if err != nil {
		return r, id, fencegate.AsError(err)
	}
	o.Owner = id.Owner
	if id.Credential != "" && r.Header.Get(id.Credential) != "" {
		// Clone rather than edit the inbound request's header map, which
		// the server owns.
		r2 := *r
		r2.Header = r.Header.Clone()
		r2.Header.Del(id.Credential)
		r = &r2
	}
	return r, id, nil
}

// authorize refuses (403 forbidden) a write to any resource outside the
// identity's prefixes; the whole request is refused, so a multi-object
// write is never applied in part.
func authorize(id Identity, keys []string) *fencegate.Error {
	for _, k := range keys {
		if !id.Allows(k) {
			return fencegate.Forbidden(id.Owner, k)
		}
	}
	return nil
}
