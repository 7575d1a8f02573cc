package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestSafeNext: the login's redirect target is checked in the form the
// browser follows: whatever a hostile next becomes once cleaned (dot
// segments, a backslash, a tab or newline the browser drops) it never
// starts with "//", and it is answered as checked.
func TestSafeNext(t *testing.T) {
	for _, c := range []struct{ next, want string }{
		{"/fences?prefix=/a", "/fences?prefix=/a"},
		{"/fence?resource=%2Forders%2F7", "/fence?resource=%2Forders%2F7"},
		{"/routes/", "/routes/"},
		{"/a/./b/", "/a/b/"},
		{"/", "/"},
		{"", "/"},
		{"fences", "/"},
		{"//evil", "/"},
		{"/\\evil", "/"},
		{"/./\\evil", "/"},
		{"/a/../\\evil", "/"},
		{"/\t/evil", "/"},
		{"/\n/evil", "/"},
		{"/ /evil", "/"},
		{"/.//evil", "/evil"},
		{"/a/..//evil", "/evil"},
		{"/%2e%2e//evil", "/%2e%2e/evil"},
		{"https://evil/", "/"},
		{"/\x7f/evil", "/"},
		{"/\u3000/evil", "/"},
		{"/%zz", "/"},
		{"/a#frag", "/a"},
	} {
		if got := safeNext(c.next); got != c.want {
			t.Errorf("safeNext(%q) = %q; want %q", c.next, got, c.want)
		}
	}
}

// fakeSessions accepts one key and counts the sessions it started.
type fakeSessions struct {
	key     string
	started int
}

func (f *fakeSessions) Start(key string) (*http.Cookie, error) {
	if key != f.key {
		return nil, fencegate.Errorf(fencegate.CodeUnauthorized, "unknown or revoked API key")
	}
	f.started++
	return &http.Cookie{Name: "fencegate_session", Value: fmt.Sprint(f.started), Path: "/"}, nil
}

func (f *fakeSessions) End(*http.Request) *http.Cookie {
	return &http.Cookie{Name: "fencegate_session", MaxAge: -1}
}

func loginMux(t *testing.T, s SessionManager) *http.ServeMux {
	t.Helper()
	c := &Console{Sessions: s, Status: fakeStatus{}}
	mux := http.NewServeMux()
	if err := c.Register(mux); err != nil {
		t.Fatal(err)
	}
	return mux
}

func postLogin(mux http.Handler, remote, key, next string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"key": {key}, "next": {next}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

// TestLoginRedirect: the Location a login answers is same-origin for every
// next the browser would turn into "//evil" (TestLoginRedirectBrowser
// follows it in Chromium).
func TestLoginRedirect(t *testing.T) {
	mux := loginMux(t, &fakeSessions{key: "right"})
	for _, next := range []string{"/./\\evil", "/a/../\\evil", "/\t/evil", "//evil", "/.//evil"} {
		w := postLogin(mux, "192.0.2.1:1000", "right", next)
		loc := w.Header().Get("Location")
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.ContainsAny(loc, "\\\t\r\n") {
			t.Errorf("next %q: %d Location %q; want 303 to a path on this listener", next, w.Code, loc)
		}
	}
	if loc := postLogin(mux, "192.0.2.1:1000", "right", "/fences?prefix=/a").Header().Get("Location"); loc != "/fences?prefix=/a" {
		t.Errorf("a plain next: Location %q", loc)
	}
}

// TestLoginRateLimit: failed logins are limited per client and per key
// with 429 and Retry-After, answered before the key is checked (a right
// key from a limited client waits too); another client with the right key
// still gets in.
func TestLoginRateLimit(t *testing.T) {
	s := &fakeSessions{key: "right"}
	mux := loginMux(t, s)
	counts := map[int]int{}
	for i := range 300 {
		w := postLogin(mux, "192.0.2.1:1000", fmt.Sprintf("wrong-%d", i), "/")
		counts[w.Code]++
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if counts[http.StatusUnauthorized] != LoginBurst || counts[http.StatusTooManyRequests] != 300-LoginBurst {
		t.Fatalf("300 wrong keys from one client: %v; want %d answered 401, the rest 429", counts, LoginBurst)
	}
	if w := postLogin(mux, "192.0.2.1:1001", "right", "/"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the right key from the limited client: %d; want 429", w.Code)
	}
	if w := postLogin(mux, "192.0.2.2:1000", "right", "/"); w.Code != http.StatusSeeOther {
		t.Fatalf("the right key from another client: %d; want 303", w.Code)
	}
	// One wrong key tried from many clients (each new to the limiter).
	counts = map[int]int{}
	for i := range 50 {
		w := postLogin(mux, fmt.Sprintf("198.51.100.%d:1000", i), "guess", "/")
		counts[w.Code]++
	}
	if counts[http.StatusUnauthorized] != LoginBurst || counts[http.StatusTooManyRequests] != 50-LoginBurst {
		t.Fatalf("one wrong key from 50 clients: %v; want %d answered 401, the rest 429", counts, LoginBurst)
	}
	// IPv6 clients are limited by their /64.
	for i := range LoginBurst {
		postLogin(mux, fmt.Sprintf("[2001:db8::%x]:1000", i+1), fmt.Sprintf("v6-%d", i), "/")
	}
	if w := postLogin(mux, "[2001:db8::ffff]:1000", "v6-x", "/"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("another address of the same /64: %d; want 429", w.Code)
	}
	if s.started != 1 {
		t.Fatalf("%d sessions started; want 1", s.started)
	}
}

// TestLoginLimitFullTable: a flood of failures from more clients than the
// limiter remembers (an IPv6 /48 holds 65,536 /64s) locks no one else out:
// a new client's login is not held, and a client that used up its failures
// is still limited after the flood. The clock stands still.
func TestLoginLimitFullTable(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	l := &loginLimiter{now: func() time.Time { return at }}
	for range LoginBurst {
		l.fail("cspent", "kspent")
	}
	for i := range 2 * maxLimited {
		ids := []string{fmt.Sprintf("cflood-%d", i), fmt.Sprintf("kflood-%d", i)}
		if l.wait(ids...) == 0 {
			l.fail(ids...)
		}
	}
	if n := len(l.buckets); n > maxLimited {
		t.Fatalf("%d buckets remembered; want at most %d", n, maxLimited)
	}
	if d := l.wait("coperator", "kright"); d != 0 {
		t.Fatalf("a new client after the flood waits %v; want 0", d)
	}
	if d := l.wait("cspent", "kother"); d == 0 {
		t.Fatal("the client that used up its failures is no longer limited after the flood")
	}
}
