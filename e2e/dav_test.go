package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// davServer is a WebDAV server the tests read the files of directly.
type davServer struct {
	name, url, root string
	preserveHost    bool // nginx compares Destination with Host
}

// apacheDAV starts Apache mod_dav.
func apacheDAV(t *testing.T) davServer {
	a := testenv.Apache(t)
	return davServer{name: "apache", url: a.URL, root: a.Root}
}

func davServers(t *testing.T) []davServer {
	a := testenv.Apache(t)
	n := testenv.Nginx(t)
	return []davServer{
		{name: "apache", url: a.URL, root: a.Root},
		{name: "nginx", url: n.URL, root: n.Root, preserveHost: true},
	}
}

// davFenced is a WebDAV route's fenced_methods: naming COPY and MOVE makes
// the route hierarchical and fences their Destination by default.
const davFenced = "      fenced_methods: [PUT, POST, DELETE, PATCH, COPY, MOVE, MKCOL, PROPPATCH, LOCK, UNLOCK]\n"

func davRouteYAML(s davServer, precondition string) string {
	r := httpRouteYAML("dav", "", s.url, precondition, "10s") + davFenced
	if s.preserveHost {
		r = strings.Replace(r, "timeout: 10s}", "timeout: 10s, preserve_host: true}", 1)
	}
	return r
}

// davFile reads a file as the server stored it, never through the gateway.
func davFile(t *testing.T, s davServer, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.root, name))
	if os.IsNotExist(err) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dav sends a fenced WebDAV request with a Destination (absolute URI on
// the gateway, as clients send it) if dest is set.
func dav(t *testing.T, method, gw, path, token, dest, body string, hdr ...[2]string) (int, string) {
	t.Helper()
	h := append([][2]string{{"Fencing-Token", token}}, hdr...)
	if dest != "" {
		h = append(h, [2]string{"Destination", gw + dest}, [2]string{"Overwrite", "T"})
	}
	return send(t, method, gw+path, h, body)
}

// TestDAVNamespaceFenced is seed test 7 on WebDAV, against real Apache
// mod_dav and nginx's DAV module, checked on the files each server holds:
// a zombie's MOVE or COPY onto a resource fenced with a newer token is
// refused and the resource's file stays the owner's; a collection DELETE
// or MOVE with a token older than a member's is refused and the member's
// file stays; a member write with a token older than a collection write
// after it is refused; a Destination on another host is refused; the
// owner's own moves go through.
func TestDAVNamespaceFenced(t *testing.T) {
	for _, s := range davServers(t) {
		t.Run(s.name, func(t *testing.T) {
			p := startFencegate(t, httpGatewayYAML(davRouteYAML(s, "")))
			gw := "http://" + p.addrs["gateway"]

			if st, body := dav(t, "PUT", gw, "/b.txt", "5", "", "owner"); st/100 != 2 {
				t.Fatalf("owner's PUT: %d %s", st, body)
			}
			if st, body := dav(t, "PUT", gw, "/z.txt", "3", "", "zombie"); st/100 != 2 {
				t.Fatalf("zombie's PUT of a fresh resource: %d %s", st, body)
			}
			for _, m := range []string{"MOVE", "COPY"} {
				st, body := dav(t, m, gw, "/z.txt", "3", "/b.txt", "")
				if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
					t.Fatalf("zombie %s onto b.txt: %d %s; want 409 stale_fencing_token", m, st, body)
				}
				if got := davFile(t, s, "b.txt"); got != "owner" {
					t.Fatalf("after the zombie's %s, b.txt = %q; want the owner's", m, got)
				}
			}
			if got := davFile(t, s, "z.txt"); got != "zombie" {
				t.Fatalf("z.txt = %q; the refused MOVE must not have moved it", got)
			}

			// A collection and a member written with a newer token.
			if st, body := dav(t, "MKCOL", gw, "/coll/", "2", "", ""); st/100 != 2 {
				t.Fatalf("MKCOL: %d %s", st, body)
			}
			if st, body := dav(t, "PUT", gw, "/coll/m", "9", "", "member"); st/100 != 2 {
				t.Fatalf("member PUT: %d %s", st, body)
			}
			for _, tc := range []struct{ method, dest string }{{"DELETE", ""}, {"MOVE", "/coll2/"}} {
				st, body := dav(t, tc.method, gw, "/coll/", "3", tc.dest, "")
				if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
					t.Fatalf("stale %s of the collection: %d %s; want 409 stale_fencing_token", tc.method, st, body)
				}
				if got := davFile(t, s, "coll/m"); got != "member" {
					t.Fatalf("after a stale %s of the collection, coll/m = %q", tc.method, got)
				}
			}
			if got := davFile(t, s, "coll2"); got != "<absent>" {
				t.Fatalf("coll2 exists after a refused MOVE")
			}

			// A collection write with a newer token (the owner's MOVE of
			// it) fences its members at both places.
			if st, body := dav(t, "MOVE", gw, "/coll/", "10", "/coll3/", ""); st/100 != 2 {
				t.Fatalf("collection owner's MOVE with token 10: %d %s", st, body)
			}
			if got := davFile(t, s, "coll3/m"); got != "member" {
				t.Fatalf("coll3/m = %q after the collection's MOVE", got)
			}
			for _, path := range []string{"/coll/m", "/coll3/m"} {
				st, body := dav(t, "PUT", gw, path, "9", "", "late")
				if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
					t.Fatalf("member PUT %s with 9 after the collection's 10: %d %s; want 409 stale_fencing_token", path, st, body)
				}
			}
			if got, gone := davFile(t, s, "coll3/m"), davFile(t, s, "coll/m"); got != "member" || gone != "<absent>" {
				t.Fatalf("coll3/m = %q, coll/m = %q after refused member writes", got, gone)
			}

			// A Destination the route does not fence.
			st, body := send(t, "MOVE", gw+"/b.txt", [][2]string{{"Fencing-Token", "5"},
				{"Destination", "http://elsewhere.example/b.txt"}}, "")
			if st != http.StatusBadRequest || refusalCode(body) != "foreign_destination" {
				t.Fatalf("MOVE to another host: %d %s; want 400 foreign_destination", st, body)
			}

			// The owners' own moves.
			if st, body := dav(t, "MOVE", gw, "/b.txt", "5", "/b2.txt", ""); st/100 != 2 {
				t.Fatalf("owner's MOVE: %d %s", st, body)
			}
			if got := davFile(t, s, "b2.txt"); got != "owner" {
				t.Fatalf("b2.txt = %q after the owner's MOVE", got)
			}
		})
	}
}

// TestDAVPreconditionNamespace: with `precondition: etag` on Apache, the
// gateway's own namespace operations never lock an owner out (a
// collection deleted and recreated, an object replaced by a MOVE: the next
// PUT lands), and a 412 the worker's own WebDAV If: condition caused is
// Apache's answer, passed on, not a bypass.
func TestDAVPreconditionNamespace(t *testing.T) {
	s := apacheDAV(t)
	p := startFencegate(t, httpGatewayYAML(davRouteYAML(s, "etag")))
	gw := "http://" + p.addrs["gateway"]
	step := func(method, path, dest, body string, want int, hdr ...[2]string) {
		t.Helper()
		if st, b := dav(t, method, gw, path, "1", dest, body, hdr...); st/100 != want/100 {
			t.Fatalf("%s %s: %d %s; want %d", method, path, st, b, want)
		}
	}
	step("MKCOL", "/e/", "", "", 201)
	step("PUT", "/e/x", "", "x1", 201)
	step("DELETE", "/e/", "", "", 204)
	step("MKCOL", "/e/", "", "", 201)
	step("PUT", "/e/x", "", "x2", 201)
	if got := davFile(t, s, "e/x"); got != "x2" {
		t.Fatalf("e/x = %q after the collection was deleted and recreated; want x2", got)
	}
	step("PUT", "/e/a", "", "a", 201)
	step("PUT", "/e/b", "", "b", 201)
	step("MOVE", "/e/a", "/e/b", "", 204)
	step("PUT", "/e/b", "", "b2", 204)
	if got := davFile(t, s, "e/b"); got != "b2" {
		t.Fatalf("e/b = %q after MOVE then PUT; want b2", got)
	}
	step("COPY", "/e/x", "/e/b", "", 204)
	step("PUT", "/e/b", "", "b3", 204)
	if got := davFile(t, s, "e/b"); got != "b3" {
		t.Fatalf("e/b = %q after COPY then PUT; want b3", got)
	}
	// The worker's own condition: a lock token it does not hold.
	st, body := dav(t, "PUT", gw, "/e/b", "1", "", "b4", [2]string{"If", "(<opaquelocktoken:00000000-0000-0000-0000-000000000000>)"})
	if st != http.StatusPreconditionFailed || refusalCode(body) != "" {
		t.Fatalf("PUT with a failing If: %d %s; want Apache's own 412", st, body)
	}
	if got := davFile(t, s, "e/b"); got != "b3" {
		t.Fatalf("e/b = %q after a refused conditional PUT", got)
	}
	step("PUT", "/e/b", "", "b5", 204)
	if got := davFile(t, s, "e/b"); got != "b5" {
		t.Fatalf("e/b = %q; want b5", got)
	}
}

// davDefaultRouteYAML is a route in front of a WebDAV server with the
// default fenced_methods (it names neither COPY nor MOVE).
func davDefaultRouteYAML(s davServer) string {
	return httpRouteYAML("dav", "", s.url, "", "10s")
}

// davCollTrees runs the collection checks of a route with the default
// fenced_methods against s, through gw (the request that writes the
// member) and gw2 (the collection's writes): a DELETE or MOVE of a
// collection older than a member's token is refused and the member's file
// stays; the collection's owner's DELETE with a newer token goes through,
// and a member write older than it is refused afterwards.
func davCollTrees(t *testing.T, s davServer, gw, gw2 string) {
	t.Helper()
	for _, c := range []string{"/c1/", "/c2/"} {
		if st, body := dav(t, "MKCOL", gw, c, "2", "", ""); st/100 != 2 {
			t.Fatalf("MKCOL %s: %d %s", c, st, body)
		}
		if st, body := dav(t, "PUT", gw, c+"m", "9", "", "member"); st/100 != 2 {
			t.Fatalf("member PUT %sm with 9: %d %s", c, st, body)
		}
	}
	for _, tc := range []struct{ method, coll, dest string }{{"DELETE", "/c1/", ""}, {"MOVE", "/c2/", "/c3/"}} {
		st, body := dav(t, tc.method, gw2, tc.coll, "3", tc.dest, "")
		if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
			t.Fatalf("%s %s with token 3 after its member's 9: %d %s; want 409 stale_fencing_token", tc.method, tc.coll, st, body)
		}
		if got := davFile(t, s, tc.coll+"m"); got != "member" {
			t.Fatalf("after a refused %s of %s, its member holds %q; want the member's write", tc.method, tc.coll, got)
		}
	}
	if davExists(t, s, "c3") {
		t.Fatal("c3 exists on the server after a refused MOVE")
	}
	// The collection's owner, with a newer token.
	if st, body := dav(t, "DELETE", gw2, "/c1/", "10", "", ""); st/100 != 2 {
		t.Fatalf("DELETE /c1/ with token 10: %d %s", st, body)
	}
	if davExists(t, s, "c1") {
		t.Fatal("c1 is still on the server after its owner's DELETE")
	}
	if st, body := dav(t, "MKCOL", gw2, "/c1/", "10", "", ""); st/100 != 2 {
		t.Fatalf("MKCOL /c1/ with token 10: %d %s", st, body)
	}
	st, body := dav(t, "PUT", gw, "/c1/m", "9", "", "late")
	if st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
		t.Fatalf("member PUT with 9 after the collection's DELETE with 10: %d %s; want 409 stale_fencing_token", st, body)
	}
	if got := davFile(t, s, "c1/m"); got != "<absent>" {
		t.Fatalf("c1/m = %q after a refused member write; want absent", got)
	}
}

// TestDAVDefaultRouteTrees: a {path} route in front of Apache mod_dav with
// the DEFAULT fenced_methods treats a DELETE or MOVE of a collection as a
// write of its members (issue 43): refused below a member's newer token,
// the member's file staying on Apache; a member write older than the
// collection's DELETE is refused after it.
func TestDAVDefaultRouteTrees(t *testing.T) {
	s := apacheDAV(t)
	p := startFencegate(t, httpGatewayYAML(davDefaultRouteYAML(s)))
	gw := "http://" + p.addrs["gateway"]
	davCollTrees(t, s, gw, gw)
}

// TestRESTCollectionLeases: on a REST route (default fenced_methods,
// leases of the in-process coordinator, tokens verified) a collection path
// written under its own lease (POST /orders) refuses none of its members'
// leases, older or newer, while a DELETE of it is a write of its members:
// refused below a member's newer token, and a member's older token is
// refused after it. Checked on the writes the upstream applied.
func TestRESTCollectionLeases(t *testing.T) {
	rec, url := newUpstream(t)
	p := startFencegate(t, gatewayYAML(url)+"coordinator: {enabled: true, listen: $COORDINATOR}\n")
	gw, coord := p.URL("gateway"), p.URL("coordinator")
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	applied := func(key string) []string {
		var out []string
		for _, a := range rec.HistoryOf(key) {
			out = append(out, a.Method+" "+a.Token)
		}
		return out
	}

	t7 := acquire(t, coord, "/orders/7", "worker-7")
	tc := acquire(t, coord, "/orders", "collector")  // newer than t7
	t8 := acquire(t, coord, "/orders/8", "worker-8") // newer than tc
	for _, w := range []struct {
		method, path string
		token        int64
	}{
		{"PUT", "/orders/8", t8},
		{"POST", "/orders", tc},  // below a member's newer lease
		{"PUT", "/orders/7", t7}, // below the collection's newer lease
		{"POST", "/orders", tc},
		{"PATCH", "/orders/7", t7},
	} {
		if st, body := write(t, w.method, gw+w.path, itoa(w.token), "x"); st/100 != 2 {
			t.Fatalf("%s %s with its own lease's token %d: %d %s; want it applied", w.method, w.path, w.token, st, body)
		}
	}
	// A DELETE of the collection changes its members: refused below
	// /orders/8's token.
	if st, body := write(t, "DELETE", gw+"/orders", itoa(tc), ""); st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
		t.Fatalf("DELETE /orders with %d below /orders/8's %d: %d %s; want 409 stale_fencing_token", tc, t8, st, body)
	}
	// With a lease newer than every member's it goes through, and the
	// members' older leases are refused from then on.
	release(t, coord, "/orders", "collector", tc)
	tn := acquire(t, coord, "/orders", "collector")
	if st, body := write(t, "DELETE", gw+"/orders", itoa(tn), ""); st/100 != 2 {
		t.Fatalf("DELETE /orders with its new lease's token %d: %d %s", tn, st, body)
	}
	if st, body := write(t, "PUT", gw+"/orders/7", itoa(t7), "late"); st != http.StatusConflict || refusalCode(body) != "stale_fencing_token" {
		t.Fatalf("PUT /orders/7 with %d after DELETE /orders with %d: %d %s; want 409 stale_fencing_token", t7, tn, st, body)
	}
	want := map[string][]string{
		"/orders":   {"POST " + itoa(tc), "POST " + itoa(tc), "DELETE " + itoa(tn)},
		"/orders/7": {"PUT " + itoa(t7), "PATCH " + itoa(t7)},
		"/orders/8": {"PUT " + itoa(t8)},
	}
	for key, w := range want {
		if got := applied(key); !slices.Equal(got, w) {
			t.Errorf("upstream applied %v to %s; want %v", got, key, w)
		}
	}
}

// TestDoctorFindsWebDAV: `fencegate doctor` asks each HTTP route's
// upstream for OPTIONS and, on Apache mod_dav (a DAV header), says what the
// route needs: ok with the defaults, FAIL with hierarchical: false (a stale
// collection DELETE would remove newer members) or with MOVE left out of
// fenced_methods; an upstream without DAV gets no such line.
func TestDoctorFindsWebDAV(t *testing.T) {
	s := apacheDAV(t)
	_, plain := newUpstream(t)
	for _, tc := range []struct {
		name, yaml string
		exit       int
		want       string
	}{
		{"defaults", davDefaultRouteYAML(s), 0, "route dav: ok: " + s.url + " speaks WebDAV (DAV: 1"},
		{"hierarchical false", davDefaultRouteYAML(s) + "      hierarchical: false\n", 1, "hierarchical is off"},
		{"MOVE not fenced", davDefaultRouteYAML(s) + "      fenced_methods: [PUT, DELETE, COPY]\n", 1, "MOVE is not fenced"},
		{"not WebDAV", httpRouteYAML("plain", "", plain, "", "10s"), 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runDoctor(t, httpGatewayYAML(tc.yaml))
			if code != tc.exit || !strings.Contains(out, tc.want) {
				t.Fatalf("doctor exit %d; want %d and %q:\n%s", code, tc.exit, tc.want, out)
			}
			if tc.want == "" && strings.Contains(out, "WebDAV (DAV:") {
				t.Fatalf("doctor found WebDAV on an upstream without DAV:\n%s", out)
			}
		})
	}
}
