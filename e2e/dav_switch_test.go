package e2e

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestDAVStrictRouteSwitchedToDefault: a WebDAV route that named COPY and
// MOVE in fenced_methods (the strict rule: a collection's level is its own
// key) is switched to the default fenced_methods (the level is the tree
// key "/c/") over the same store. A member write older than the DELETE of
// its collection made before the switch is refused after it, and
// Apache's tree stays as the DELETE left it. Before, the strict route
// recorded the DELETE on "/c" only, which the default rule does not read:
// the late member write landed.
func TestDAVStrictRouteSwitchedToDefault(t *testing.T) {
	s := apacheDAV(t)
	p := startFencegate(t, httpGatewayYAML(davRouteYAML(s, "")))
	gw := "http://" + p.addrs["gateway"]
	for _, w := range []struct{ method, path, token, body string }{
		{"MKCOL", "/c/", "2", ""}, {"PUT", "/c/m", "9", "member"}, {"DELETE", "/c/", "10", ""}, {"MKCOL", "/c/", "10", ""},
	} {
		if st, body := dav(t, w.method, gw, w.path, w.token, "", w.body); st/100 != 2 {
			t.Fatalf("%s %s with %s on the strict route: %d %s", w.method, w.path, w.token, st, body)
		}
	}
	cfg, err := os.ReadFile(p.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	def := strings.Replace(string(cfg), davFenced, "", 1)
	if def == string(cfg) {
		t.Fatal("the route names no fenced_methods to drop")
	}
	if err := os.WriteFile(p.CfgPath, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Restart()

	st, body := dav(t, "PUT", gw, "/c/m", "9", "", "late")
	if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
		t.Fatalf("member PUT with 9 after the collection's DELETE with 10, on the default route: %d %s; want 409 stale_fencing_token", st, body)
	}
	if got := davFile(t, s, "c/m"); got != "<absent>" {
		t.Fatalf("c/m = %q on Apache after a refused late member write; want absent", got)
	}
	if st, body := dav(t, "PUT", gw, "/c/m", "10", "", "owner"); st/100 != 2 || davFile(t, s, "c/m") != "owner" {
		t.Fatalf("member PUT with the collection's token 10: %d %s; c/m = %q", st, body, davFile(t, s, "c/m"))
	}
}
