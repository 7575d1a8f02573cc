package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/auth"
)

const sessionYAML = `
store: {embedded: {path: $DIR/fg.db}}
coordinator: {enabled: true, listen: 127.0.0.1:0}
admin:
  listen: 127.0.0.1:0
  auth:
    api_keys:
      - {owner: ops, sha256: "%s"}
%s
`

func sessionConfig(withSecond bool) string {
	second := ""
	if withSecond {
		second = fmt.Sprintf(`      - {owner: ops2, sha256: "%s"}`, auth.HashKey("second-key"))
	}
	return fmt.Sprintf(sessionYAML, auth.HashKey("first-key"), second)
}

// consoleLogin posts key to the admin listener's login form and returns
// the session cookie's value.
func consoleLogin(t *testing.T, admin, key string) string {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(admin+"/login", url.Values{"key": {key}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == auth.SessionCookie && ck.Value != "" {
			return ck.Value
		}
	}
	t.Fatalf("login with %s: %s, no session cookie", key, resp.Status)
	return ""
}

func withSession(t *testing.T, admin, cookie string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/v1/status", nil)
	req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: cookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConsoleSessionDiesWithKey, through the server's reloads: two logins
// with one key are two sessions; a reload that removes the key ends both,
// and the reload that adds it back does not revive them (no request came
// in between); the other key's session lives on.
func TestConsoleSessionDiesWithKey(t *testing.T) {
	dir := t.TempDir()
	s, _ := startEdge(t, strings.ReplaceAll(sessionConfig(true), "$DIR", dir), "http://127.0.0.1:1")
	admin := "http://" + s.Addr("admin")
	c1 := consoleLogin(t, admin, "second-key")
	c2 := consoleLogin(t, admin, "second-key")
	kept := consoleLogin(t, admin, "first-key")
	if c1 == c2 {
		t.Fatal("two logins share one session cookie")
	}
	if st := withSession(t, admin, c1); st != 200 {
		t.Fatalf("a fresh session: %d", st)
	}
	for _, with := range []bool{false, true} {
		if err := s.Reload(parse(t, sessionConfig(with), "http://127.0.0.1:1", dir)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{c1, c2} {
		if st := withSession(t, admin, c); st != 401 {
			t.Fatalf("a session of a key removed and added back: %d; want 401", st)
		}
	}
	if st := withSession(t, admin, kept); st != 200 {
		t.Fatalf("the session of the key kept: %d; want 200", st)
	}
	if st := withSession(t, admin, consoleLogin(t, admin, "second-key")); st != 200 {
		t.Fatalf("a new login with the key added back: %d; want 200", st)
	}
}
