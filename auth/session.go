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
// configured by, a random number drawn for this login, and an HMAC of the
// three under a key this process drew at start. Each login is a session of
// its own, remembered by this process until it ends: when it expires, when
// the browser logs out (End), when its key is removed from the
// configuration (Retain, or the first request that finds the key gone: a
// key added back later does not bring it back), or when the process
// restarts; a session is valid only on the replica that started it.
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

	mu   sync.Mutex
	live map[[sha256.Size]byte]session // by MAC: the sessions not ended
}

// session is a live session: the key it was started with, and its expiry.
type session struct {
	hash [sha256.Size]byte
	exp  time.Time
}

// maxSessions bounds the sessions remembered; starting one more ends the
// one closest to its expiry. Only a valid key starts a session.
const maxSessions = 10000

// NewSessions returns Sessions with a fresh random key.
func NewSessions() *Sessions {
	s := &Sessions{now: time.Now, live: map[[sha256.Size]byte]session{}}
	rand.Read(s.key[:])
	return s
}

func (s *Sessions) ttl() time.Duration {
	if s.TTL > 0 {
		return s.TTL
	}
	return DefaultSessionTTL
}

// cookie value: base64url(expiry unix seconds (8 bytes) | key hash (32) |
// login nonce (16) | MAC (32)).
const (
	sessionNonce = 16
	sessionMAC   = 8 + sha256.Size + sessionNonce
	sessionLen   = sessionMAC + sha256.Size
)

func (s *Sessions) mac(signed []byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write(signed)
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
	now := s.now()
	exp := now.Add(s.ttl()).Truncate(time.Second)
	var b [sessionLen]byte
	binary.BigEndian.PutUint64(b[:8], uint64(exp.Unix()))
	copy(b[8:], sum[:])
	rand.Read(b[8+sha256.Size : sessionMAC])
	mac := s.mac(b[:sessionMAC])
	copy(b[sessionMAC:], mac[:])
	s.mu.Lock()
	for m, l := range s.live {
		if !now.Before(l.exp) {
			delete(s.live, m)
		}
	}
	if len(s.live) >= maxSessions {
		var first [sha256.Size]byte
		var firstExp time.Time
		for m, l := range s.live {
			if firstExp.IsZero() || l.exp.Before(firstExp) {
				first, firstExp = m, l.exp
			}
		}
		delete(s.live, first)
	}
	s.live[mac] = session{hash: sum, exp: exp}
	s.mu.Unlock()
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

// parse returns the MAC of r's session cookie when the MAC is this
// process's.
func (s *Sessions) parse(r *http.Request) (mac [sha256.Size]byte, ok bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) != sessionLen {
		return
	}
	want := s.mac(b[:sessionMAC])
	if !hmac.Equal(want[:], b[sessionMAC:]) {
		return
	}
	return want, true
}

// identity is Identity for a nil s too (no sessions).
func (s *Sessions) identity(a *Authenticator, r *http.Request) (gateway.Identity, bool) {
	if s == nil {
		return gateway.Identity{}, false
	}
	return s.Identity(a, r)
}

// Identity returns the identity of r's session: a cookie this process
// issued for a session not expired, not ended, whose key a still holds. A
// session whose key a does not hold ends here.
func (s *Sessions) Identity(a *Authenticator, r *http.Request) (gateway.Identity, bool) {
	mac, ok := s.parse(r)
	if !ok {
		return gateway.Identity{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, live := s.live[mac]
	if !live {
		return gateway.Identity{}, false
	}
	id, ok := a.key(l.hash)
	if !ok || !s.now().Before(l.exp) {
		delete(s.live, mac)
		return gateway.Identity{}, false
	}
	id.Credential = SessionCookie
	return id, true
}

// Retain ends every session whose key a does not hold. Call it whenever
// the listener's keys change: a session then dies with its key, even when
// no request came while the key was gone, and a key added back starts
// sessions afresh.
func (s *Sessions) Retain(a *Authenticator) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m, l := range s.live {
		if _, ok := a.key(l.hash); !ok {
			delete(s.live, m)
		}
	}
}

// End ends r's session, if it has one, on this process (a copy of the
// cookie no longer works either), and returns the cookie that deletes it
// from the browser.
func (s *Sessions) End(r *http.Request) *http.Cookie {
	if mac, ok := s.parse(r); ok {
		s.mu.Lock()
		delete(s.live, mac)
		s.mu.Unlock()
	}
	return s.cookie("", time.Time{})
}

// key returns the identity of the key of SHA-256 hash; none on a nil a.
func (a *Authenticator) key(hash [sha256.Size]byte) (gateway.Identity, bool) {
	if a == nil {
		return gateway.Identity{}, false
	}
	id, ok := a.keys[hash]
	return id, ok
}
