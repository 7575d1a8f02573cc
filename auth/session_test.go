package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func sessionAuth(t *testing.T, keys ...string) *Authenticator {
	t.Helper()
	var o Options
	for _, k := range keys {
		o.APIKeys = append(o.APIKeys, APIKey{Owner: "op-" + k, SHA256: HashKey(k)})
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func withCookie(c *http.Cookie) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(c)
	return r
}

// TestSessionPerLogin: two logins with one key in the same second are two
// sessions: different cookies, and logging one out leaves the other.
func TestSessionPerLogin(t *testing.T) {
	s := NewSessions()
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	a := sessionAuth(t, "k1")
	c1, _, err := s.Start(a, "k1")
	if err != nil {
		t.Fatal(err)
	}
	c2, _, err := s.Start(a, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if c1.Value == c2.Value {
		t.Fatal("two logins in the same second share one cookie")
	}
	s.End(withCookie(c1))
	if _, ok := s.Identity(a, withCookie(c1)); ok {
		t.Fatal("the logged-out session still works")
	}
	if id, ok := s.Identity(a, withCookie(c2)); !ok || id.Owner != "op-k1" {
		t.Fatalf("the other login's session: %v %v; want op-k1", id, ok)
	}
	now = now.Add(DefaultSessionTTL)
	if _, ok := s.Identity(a, withCookie(c2)); ok {
		t.Fatal("an expired session still works")
	}
}

// TestSessionDiesWithKey: a session whose key is removed does not come
// back when the key is added again, whether or not a request came while
// the key was gone (Retain at the reload, or the request itself).
func TestSessionDiesWithKey(t *testing.T) {
	s := NewSessions()
	with := sessionAuth(t, "k1", "k2")
	without := sessionAuth(t, "k2")
	c1, _, _ := s.Start(with, "k1")
	c2, _, _ := s.Start(with, "k1")
	other, _, _ := s.Start(with, "k2")

	// A reload removes k1 and Retain ends its sessions; no request comes
	// until k1 is back.
	s.Retain(without)
	if _, ok := s.Identity(with, withCookie(c1)); ok {
		t.Fatal("a removed key's session came back with the key (after Retain)")
	}
	// No Retain: the first request that finds the key gone ends it.
	if _, ok := s.Identity(without, withCookie(c2)); ok {
		t.Fatal("a session works without its key")
	}
	if _, ok := s.Identity(with, withCookie(c2)); ok {
		t.Fatal("a removed key's session came back with the key (after a request)")
	}
	if _, ok := s.Identity(with, withCookie(other)); !ok {
		t.Fatal("the session of a key kept was ended")
	}
	s.Retain(nil) // every key removed
	if _, ok := s.Identity(with, withCookie(other)); ok {
		t.Fatal("a session outlived the removal of every key")
	}
	c3, _, err := s.Start(with, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Identity(with, withCookie(c3)); !ok {
		t.Fatal("a new login with the key added back does not work")
	}
}
