// Package auth answers "who sends this request, and what may they write"
// for gateway routes, the coordinator API and the admin API: bearer API keys
// kept as SHA-256 hashes, and client certificates verified by the TLS
// listener (mTLS).
package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/resource"
)

// Authenticator checks credentials against one auth block. It is immutable;
// a reload builds a new one, which is how a removed key is revoked.
type Authenticator struct {
	keys  map[[sha256.Size]byte]gateway.Identity
	certs map[string]gateway.Identity // by certificate name
}

var _ gateway.Authenticator = (*Authenticator)(nil)

// Options are one auth block: the identities it accepts.
type Options struct {
	// APIKeys are bearer keys (Authorization: Bearer <key>).
	APIKeys []APIKey
	// ClientCerts are identities proven by a client certificate that the
	// TLS listener verified.
	ClientCerts []ClientCert
}

// APIKey is one bearer key, known by the SHA-256 of the key (HashKey).
type APIKey struct {
	// Owner is the identity: the owner in logs, spans and fence records.
	Owner string
	// SHA256 is the lower-case hex SHA-256 of the key.
	SHA256 string
	// Prefixes, if set, limit the identity to resources under them;
	// empty: every resource.
	Prefixes []string
	// BindOwner limits the lease owner a coordinator or admin request may
	// name to Owner or Owner/<anything>.
	BindOwner bool
}

// ClientCert is an identity a client certificate proves by naming Name as
// its Common Name or as a DNS, URI or e-mail subject alternative name.
type ClientCert struct {
	Name      string
	Prefixes  []string
	BindOwner bool // as APIKey.BindOwner, with Name as the owner
}

// New returns the Authenticator of c, or nil if c asks for no credentials.
func New(c Options) (*Authenticator, error) {
	if len(c.APIKeys) == 0 && len(c.ClientCerts) == 0 {
		return nil, nil
	}
	a := &Authenticator{
		keys:  make(map[[sha256.Size]byte]gateway.Identity, len(c.APIKeys)),
		certs: make(map[string]gateway.Identity, len(c.ClientCerts)),
	}
	for _, k := range c.APIKeys {
		var sum [sha256.Size]byte
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("api key of %s: sha256 is not 64 hex digits", k.Owner)
		} else {
			copy(sum[:], b)
		}
		a.keys[sum] = gateway.Identity{Owner: k.Owner, Prefixes: prefixes(k.Prefixes), Credential: "Authorization", BindOwner: k.BindOwner}
	}
	for _, cc := range c.ClientCerts {
		a.certs[cc.Name] = gateway.Identity{Owner: cc.Name, Prefixes: prefixes(cc.Prefixes), BindOwner: cc.BindOwner}
	}
	return a, nil
}

// prefixes keeps "no prefixes" as nil, which gateway.Identity reads as
// "every resource".
func prefixes(p []string) []string {
	if len(p) == 0 {
		return nil
	}
	return append([]string(nil), p...)
}

// HashKey is the SHA-256 hex form an API key is configured with.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Authenticate implements gateway.Authenticator: a bearer key when the
// request sends one and keys are configured, else a verified client
// certificate.
func (a *Authenticator) Authenticate(r *http.Request) (gateway.Identity, error) {
	if h := r.Header.Get("Authorization"); h != "" && len(a.keys) > 0 {
		scheme, key, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
			return gateway.Identity{}, unauthorized("Authorization must be \"Bearer <api key>\"")
		}
		// Looking the hash up in a map leaks, through timing, nothing an
		// attacker can use: finding a key whose hash is close to a valid
		// one's is as hard as finding the key.
		id, ok := a.keys[sha256.Sum256([]byte(strings.TrimSpace(key)))]
		if !ok {
			return gateway.Identity{}, unauthorized("unknown or revoked API key")
		}
		return id, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(a.certs) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		for _, name := range certNames(leaf) {
			if id, ok := a.certs[name]; ok {
				return id, nil
			}
		}
		return gateway.Identity{}, unauthorized("the client certificate names no configured identity")
	}
	switch {
	case len(a.keys) > 0 && len(a.certs) > 0:
		return gateway.Identity{}, unauthorized("send an API key (Authorization: Bearer <key>) or a client certificate")
	case len(a.keys) > 0:
		return gateway.Identity{}, unauthorized("send an API key (Authorization: Bearer <key>)")
	}
	return gateway.Identity{}, unauthorized("send a client certificate")
}

// certNames are the names a certificate proves: its Common Name and its
// DNS, URI and e-mail subject alternative names. The listener verified the
// chain (tls.client_ca_file), so every one of them is vouched for by the CA.
func certNames(c *x509.Certificate) []string {
	names := make([]string, 0, 1+len(c.DNSNames)+len(c.URIs)+len(c.EmailAddresses))
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	names = append(names, c.DNSNames...)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	return append(names, c.EmailAddresses...)
}

func unauthorized(msg string) *fencegate.Error {
	return fencegate.Errorf(fencegate.CodeUnauthorized, "%s", msg)
}

type identityKey struct{}

// IdentityFrom returns the identity Middleware authenticated, if any.
func IdentityFrom(ctx context.Context) (gateway.Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(gateway.Identity)
	return id, ok
}

// maxPeek bounds the JSON body Middleware reads to find the resource.
const maxPeek = 1 << 20

// Middleware requires a's credentials on every request to next except the
// paths in open (probes). An identity with prefixes may only name
// resources under them: the resource is the `resource` query parameter or
// the "resource" field of a JSON body (the coordinator and admin APIs name
// it so); a request naming none is refused for such an identity. An
// identity with BindOwner may only name its own owner (or owner/...) in the
// "owner" field of a JSON body (the coordinator's lease calls); a body
// naming none is left to the API, which requires one. The identity is in
// the request context (IdentityFrom). A nil a passes every request through.
func Middleware(a *Authenticator, next http.Handler, open ...string) http.Handler {
	return SessionMiddleware(a, nil, "", next, open...)
}

// SessionMiddleware is Middleware that also accepts s's session cookie on
// GET and HEAD requests that send no Authorization (Sessions says why only
// those). With login set, a browser's page request (GET, Accept: text/html)
// without credentials is redirected there (with ?next=) instead of
// answered 401.
func SessionMiddleware(a *Authenticator, s *Sessions, login string, next http.Handler, open ...string) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range open {
			if r.URL.Path == p {
				next.ServeHTTP(w, r)
				return
			}
		}
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		var id gateway.Identity
		var err error
		if sid, ok := s.identity(a, r); ok && read && r.Header.Get("Authorization") == "" {
			id = sid
		} else if id, err = a.Authenticate(r); err != nil {
			if login != "" && read && r.Header.Get("Authorization") == "" && strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, login+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="fencegate"`)
			httprefusal.WriteJSON(w, refusal(err))
			return
		}
		if id.Prefixes != nil || id.BindOwner {
			names, owner, r2, err := requestNames(r)
			if err != nil {
				httprefusal.WriteJSON(w, refusal(err))
				return
			}
			r = r2
			if id.BindOwner && owner != "" && owner != id.Owner && !strings.HasPrefix(owner, id.Owner+"/") {
				httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeForbidden,
					"%s may only act as owner %s or %s/...", id.Owner, id.Owner, id.Owner))
				return
			}
			if id.Prefixes != nil && len(names) == 0 {
				httprefusal.WriteJSON(w, fencegate.Errorf(fencegate.CodeForbidden,
					"%s may only act on named resources under its prefixes", id.Owner))
				return
			}
			for _, res := range names {
				if !allows(id, res) {
					e := fencegate.Errorf(fencegate.CodeForbidden, "%s may not act on %s", id.Owner, clip(res))
					e.Resource = clip(res)
					httprefusal.WriteJSON(w, e)
					return
				}
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// requestNames finds every resource a coordinator or admin request names,
// and the owner it acts as: each `resource` query parameter and the
// "resource" and "owner" fields of a JSON body, as the APIs decode them
// (the first JSON value of the body). Every resource must be allowed: an
// API acts on one of them, and which one is its business, not the guard's
// (a query naming an allowed resource must not vouch for a body naming
// another). The request is returned with its body restored when it had to
// be read.
func requestNames(r *http.Request) ([]string, string, *http.Request, error) {
	var names []string
	for _, res := range r.URL.Query()["resource"] {
		if res != "" {
			names = append(names, res)
		}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return names, "", r, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
	if err != nil {
		return nil, "", r, fencegate.Errorf(fencegate.CodeInvalidRequest, "reading the request body: %v", err)
	}
	if len(b) > maxPeek {
		return nil, "", r, fencegate.Errorf(fencegate.CodeBodyTooLarge, "request body over %d bytes", maxPeek)
	}
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(b))
	var v struct {
		Resource string `json:"resource"`
		Owner    string `json:"owner"`
	}
	// The first JSON value, as the APIs' decoders read it, whatever the
	// Content-Type says (they do not look at it; the listener's guard
	// refusing other types is a second layer, not this one's premise):
	// trailing data does not hide the resource, field names match without
	// case, and the last of duplicates wins, as there. A body that is not
	// JSON names nothing; the API itself answers it.
	_ = json.NewDecoder(bytes.NewReader(b)).Decode(&v)
	if v.Resource != "" {
		names = append(names, v.Resource)
	}
	return names, v.Owner, r2, nil
}

// allows reports whether id may act on res, as the name is given and in
// the canonical form the APIs act on ("/billing/eu/." is the lease and
// fence "/billing/eu"). A name without a canonical form is refused by the
// API itself.
func allows(id gateway.Identity, res string) bool {
	if !id.Allows(res) {
		return false
	}
	c, err := resource.CanonicalName(res)
	return err != nil || id.Allows(c)
}

// clip bounds client input echoed in a refusal.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

func refusal(err error) *fencegate.Error { return fencegate.AsError(err) }
