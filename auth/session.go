package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "fencegate_session"

// DefaultSessionTTL is how long a console login lasts when Sessions.TTL is
// zero: a working day.
const DefaultSessionTTL = 8 * time.Hour

// Sessions turns an API key typed into the console's login form into a
// browser session. Browsers send no bearer keys, so without it the console
// of an admin listener that asks for credentials could only be read with
// curl.
//
// The cookie carries no key: only its expiry, the SHA-256 the key is
// configured by, and an HMAC of both under a key this process drew at
// start. So a session ends when it expires, when the key is removed from
// the configuration (the identity is looked up on every request), when the
// browser logs out (End), or when the process restarts; a session is valid
// only on the replica that started it.
//
// A session authenticates only GET and HEAD requests (Middleware): it opens
// the console, which only reads, and never the admin API's writes (fence
// advance and reset), which still need the bearer key. That, and the
// cookie's SameSite=Strict, is what keeps a cross-site request from acting
// with an operator's session.
type Sessions struct {
	// TTL is how long a session lasts; zero means DefaultSessionTTL.
	TTL time.Duration

	key [32]byte
	now func() time.Time

	mu    sync.Mutex
	ended map[[sha256.Size]byte]time.Time // MAC of a logged-out session -> its expiry
}

// NewSessions returns Sessions with a fresh random key.
func NewSessions() *Sessions {
	s := &Sessions{now: time.Now, ended: map[[sha256.Size]byte]time.Time{}}
	rand.Read(s.key[:])
	return s
}

func (s *Sessions) ttl() time.Duration {
	if s.TTL > 0 {
		return s.TTL
	}
	return DefaultSessionTTL
}

// cookie value: base64url(expiry unix seconds (8 bytes) | key hash (32) | MAC (32)).
const sessionLen = 8 + sha256.Size + sha256.Size

func (s *Sessions) mac(exp []byte, hash []byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write(exp)
	m.Write(hash)
	var out [sha256.Size]byte
	copy(out[:], m.Sum(nil))
	return out
}

// Start checks key against a and returns the cookie of a new session for
// its identity. The cookie is HttpOnly (no script reads it), Secure (never
// sent over plain HTTP, except to localhost, which browsers treat as
// secure), SameSite=Strict (never sent with a request another site
// starts), and expires with the session.
func (s *Sessions) Start(a *Authenticator, key string) (*http.Cookie, gateway.Identity, error) {
	if a == nil || len(a.keys) == 0 {
		return nil, gateway.Identity{}, unauthorized("this listener takes no API keys")
	}
	key = strings.TrimSpace(key)
	sum := sha256.Sum256([]byte(key))
	id, ok := a.keys[sum]
	if key == "" || !ok {
		return nil, gateway.Identity{}, unauthorized("unknown or revoked API key")
	}
	exp := s.now().Add(s.ttl()).Truncate(time.Second)
	var b [sessionLen]byte
	binary.BigEndian.PutUint64(b[:8], uint64(exp.Unix()))
	copy(b[8:], sum[:])
	mac := s.mac(b[:8], sum[:])
	copy(b[8+sha256.Size:], mac[:])
	c := s.cookie(base64.RawURLEncoding.EncodeToString(b[:]), exp)
	id.Credential = SessionCookie
	return c, id, nil
}

func (s *Sessions) cookie(value string, exp time.Time) *http.Cookie {
	c := &http.Cookie{Name: SessionCookie, Value: value, Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = exp
		c.MaxAge = int(exp.Sub(s.now()).Seconds())
	}
	return c
}

// parse returns the MAC, expiry and key hash of r's session cookie when
// the MAC is this process's.
func (s *Sessions) parse(r *http.Request) (mac [sha256.Size]byte, exp time.Time, hash [sha256.Size]byte, ok bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) != sessionLen {
		return
	}
	want := s.mac(b[:8], b[8:8+sha256.Size])
	if !hmac.Equal(want[:], b[8+sha256.Size:]) {
		return
	}
	copy(hash[:], b[8:8+sha256.Size])
	return want, time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0), hash, true
}

// identity is Identity for a nil s too (no sessions).
func (s *Sessions) identity(a *Authenticator, r *http.Request) (gateway.Identity, bool) {
	if s == nil {
		return gateway.Identity{}, false
	}
	return s.Identity(a, r)
}

// Identity returns the identity of r's session: a cookie this process
// issued, not expired, not ended, whose key a still holds.
func (s *Sessions) Identity(a *Authenticator, r *http.Request) (gateway.Identity, bool) {
	if a == nil {
		return gateway.Identity{}, false
	}
	mac, exp, hash, ok := s.parse(r)
	if !ok || !s.now().Before(exp) {
		return gateway.Identity{}, false
	}
	s.mu.Lock()
	_, ended := s.ended[mac]
	s.mu.Unlock()
	if ended {
		return gateway.Identity{}, false
	}
	id, ok := a.keys[hash]
	if !ok {
		return gateway.Identity{}, false
	}
	id.Credential = SessionCookie
	return id, true
}

// End ends r's session, if it has one, on this process (a copy of the
// cookie no longer works either), and returns the cookie that deletes it
// from the browser.
func (s *Sessions) End(r *http.Request) *http.Cookie {
	if mac, exp, _, ok := s.parse(r); ok {
		now := s.now()
		s.mu.Lock()
		for m, e := range s.ended {
			if !now.Before(e) {
				delete(s.ended, m) // expired anyway
			}
		}
		if now.Before(exp) {
			s.ended[mac] = exp
		}
		s.mu.Unlock()
	}
	return s.cookie("", time.Time{})
}
