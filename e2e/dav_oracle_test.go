package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/resource"
)

// The write-set oracle of {path} routes in front of WebDAV servers (issue
// 41 item 4): each request shape of davCorpus is sent to Apache mod_dav
// and to nginx's DAV modules, and the served directory (files and their
// content, directories, Apache's dead properties and lock-null lists under
// .DAV/) is compared before and after to learn what the server changed.
// White-box (TestDAVWriteSetWhiteBox): each shape goes straight to the
// server on a fresh copy of the seeded tree, and the gateway's
// classification of the same bytes (the fences it admits the request on)
// must cover every changed path, or the gateway refuses the request.
// Black-box (TestDAVWriteSetOracle): the tree is seeded through the
// gateway with token 100, each shape goes through the gateway with token
// 5, and nothing seeded may change.

// davShape is one request as it goes on the wire: method and request
// target as written; "$HOST" in path and dest stands for the authority of
// the server the request is sent to (the gateway's, or the DAV server's).
type davShape struct {
	name   string
	method string
	path   string
	dest   string            // the Destination header ("": none)
	hdr    map[string]string // more header fields
	body   string
	// own: a write of the zombie's own resources only, which the gateway
	// forwards with token 5 (the oracle's control).
	own bool
}

const (
	davHigh = 100 // the seeded tree's token
	davLow  = 5   // the zombie's token; it owns /own.txt and /own/
)

// davVictims are the seeded tree's files (token 100), and davColls its
// collections, whose member trees are fenced at 100 (davSeed).
var (
	davColls   = []string{"/c/", "/c/sub/", "/d/"}
	davVictims = []string{"/f.txt", "/g.txt", "/c/m.txt", "/c/sub/n.txt", "/d/x.txt"}
)

// davOwn reports whether a path is the zombie's own (token 5 may change
// it): /own.txt and /own/ with everything below.
func davOwn(p string) bool {
	return p == "/own.txt" || p == "/own" || strings.HasPrefix(p, "/own/")
}

const propBody = `<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:x"><D:set><D:prop><Z:p>v</Z:p></D:prop></D:set></D:propertyupdate>`
const lockBody = `<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>`

// davCorpus is the oracle's corpus: every WebDAV write aimed at the
// seeded tree, directly and through the encodings a server may read
// another way than the gateway (dot segments raw and encoded, %2F, "//",
// trailing slashes, a Destination relative, absolute, encoded, on another
// host, doubled), and the zombie's own resources moved or copied onto it.
func davCorpus() []davShape {
	x := map[string]string{"Content-Type": "application/xml"}
	ow := func(v string) map[string]string { return map[string]string{"Overwrite": v} }
	depth := func(d, o string) map[string]string { return map[string]string{"Depth": d, "Overwrite": o} }
	s := []davShape{
		// PUT, on victims and through encodings.
		{name: "PUT a victim", method: "PUT", path: "/f.txt", body: "EVIL"},
		{name: "PUT a member", method: "PUT", path: "/c/m.txt", body: "EVIL"},
		{name: "PUT a new member of a fenced collection", method: "PUT", path: "/c/new.txt", body: "EVIL"},
		{name: "PUT a deep member", method: "PUT", path: "/c/sub/n.txt", body: "EVIL"},
		{name: "PUT raw ..", method: "PUT", path: "/own/../f.txt", body: "EVIL"},
		{name: "PUT %2e%2e", method: "PUT", path: "/own/%2e%2e/f.txt", body: "EVIL"},
		{name: "PUT %2E%2E", method: "PUT", path: "/own/%2E%2E/f.txt", body: "EVIL"},
		{name: "PUT .%2e", method: "PUT", path: "/own/.%2e/c/m.txt", body: "EVIL"},
		{name: "PUT %2F..%2F", method: "PUT", path: "/own%2f..%2ff.txt", body: "EVIL"},
		{name: "PUT ..%2F", method: "PUT", path: "/own/..%2ff.txt", body: "EVIL"},
		{name: "PUT %2e%2e%2F", method: "PUT", path: "/own/%2e%2e%2ff.txt", body: "EVIL"},
		{name: "PUT c%2Fm", method: "PUT", path: "/c%2Fm.txt", body: "EVIL"},
		{name: "PUT %2Ff", method: "PUT", path: "/%2Ff.txt", body: "EVIL"},
		{name: "PUT //", method: "PUT", path: "//f.txt", body: "EVIL"},
		{name: "PUT inner //", method: "PUT", path: "/c//m.txt", body: "EVIL"},
		{name: "PUT ./", method: "PUT", path: "/./f.txt", body: "EVIL"},
		{name: "PUT sub/./", method: "PUT", path: "/c/sub/./n.txt", body: "EVIL"},
		{name: "PUT trailing slash", method: "PUT", path: "/f.txt/", body: "EVIL"},
		{name: "PUT encoded letter", method: "PUT", path: "/f%2etxt", body: "EVIL"},
		{name: "PUT encoded collection", method: "PUT", path: "/%63/m.txt", body: "EVIL"},
		{name: "PUT with a query", method: "PUT", path: "/f.txt?x=1", body: "EVIL"},
		{name: "PUT absolute-form", method: "PUT", path: "http://$HOST/f.txt", body: "EVIL"},
		{name: "PUT absolute-form with dots", method: "PUT", path: "http://$HOST/own/../f.txt", body: "EVIL"},
		{name: "PUT backslash", method: "PUT", path: `/own\..\f.txt`, body: "EVIL"},
		{name: "PUT path parameter", method: "PUT", path: "/f.txt;x=1", body: "EVIL"},
		{name: "PUT a range", method: "PUT", path: "/f.txt", body: "E", hdr: map[string]string{"Content-Range": "bytes 0-0/1"}},
		{name: "PUT into .DAV", method: "PUT", path: "/c/.DAV/m.txt", body: "EVIL"},
		{name: "lower-case put", method: "put", path: "/f.txt", body: "EVIL"},
		{name: "mixed-case Put", method: "Put", path: "/f.txt", body: "EVIL"},
		{name: "PUT with a method override", method: "PUT", path: "/own/x.txt", body: "EVIL", hdr: map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		{name: "POST with a method override", method: "POST", path: "/f.txt", hdr: map[string]string{"X-HTTP-Method-Override": "DELETE"}},

		// DELETE.
		{name: "DELETE a victim", method: "DELETE", path: "/f.txt"},
		{name: "DELETE a collection", method: "DELETE", path: "/c/"},
		{name: "DELETE a collection without its slash", method: "DELETE", path: "/c"},
		{name: "DELETE a sub-collection", method: "DELETE", path: "/c/sub/"},
		{name: "DELETE Depth 0", method: "DELETE", path: "/c/", hdr: map[string]string{"Depth": "0"}},
		{name: "DELETE through ..", method: "DELETE", path: "/own/../c/"},
		{name: "DELETE trailing ..", method: "DELETE", path: "/c/sub/.."},
		{name: "DELETE trailing %2e%2e", method: "DELETE", path: "/c/sub/%2e%2e/"},
		{name: "DELETE c%2F", method: "DELETE", path: "/c%2F"},
		{name: "DELETE the root", method: "DELETE", path: "/"},
		{name: "DELETE // root", method: "DELETE", path: "//c/"},
		{name: "lower-case delete", method: "delete", path: "/f.txt"},

		// MKCOL.
		{name: "MKCOL in a fenced collection", method: "MKCOL", path: "/c/newcol/"},
		{name: "MKCOL on a file", method: "MKCOL", path: "/f.txt/"},
		{name: "MKCOL through ..", method: "MKCOL", path: "/own/../d/newcol"},

		// COPY: the Destination in every spelling.
		{name: "COPY onto a victim", method: "COPY", path: "/own.txt", dest: "http://$HOST/f.txt", hdr: ow("T")},
		{name: "COPY onto a victim, Overwrite F", method: "COPY", path: "/own.txt", dest: "http://$HOST/f.txt", hdr: ow("F")},
		{name: "COPY onto a victim, overwrite t", method: "COPY", path: "/own.txt", dest: "http://$HOST/f.txt", hdr: ow("t")},
		{name: "COPY onto a new member", method: "COPY", path: "/own.txt", dest: "http://$HOST/c/new.txt"},
		{name: "COPY a collection onto a collection", method: "COPY", path: "/own/", dest: "http://$HOST/c/", hdr: depth("infinity", "T")},
		{name: "COPY Depth 0 onto a collection", method: "COPY", path: "/own/", dest: "http://$HOST/c/", hdr: depth("0", "T")},
		{name: "COPY to an absolute path", method: "COPY", path: "/own.txt", dest: "/f.txt", hdr: ow("T")},
		{name: "COPY to a relative path", method: "COPY", path: "/own.txt", dest: "f.txt", hdr: ow("T")},
		{name: "COPY to a relative ..", method: "COPY", path: "/own/o.txt", dest: "../f.txt", hdr: ow("T")},
		{name: "COPY to raw ..", method: "COPY", path: "/own.txt", dest: "http://$HOST/own/../f.txt", hdr: ow("T")},
		{name: "COPY to %2e%2e", method: "COPY", path: "/own.txt", dest: "http://$HOST/own/%2e%2e/f.txt", hdr: ow("T")},
		{name: "COPY to %2F..%2F", method: "COPY", path: "/own.txt", dest: "http://$HOST/own%2f..%2ff.txt", hdr: ow("T")},
		{name: "COPY to c%2Fm", method: "COPY", path: "/own.txt", dest: "http://$HOST/c%2fm.txt", hdr: ow("T")},
		{name: "COPY to //", method: "COPY", path: "/own.txt", dest: "http://$HOST//f.txt", hdr: ow("T")},
		{name: "COPY to an encoded name", method: "COPY", path: "/own.txt", dest: "http://$HOST/%66.txt", hdr: ow("T")},
		{name: "COPY to a trailing slash", method: "COPY", path: "/own.txt", dest: "http://$HOST/f.txt/", hdr: ow("T")},
		{name: "COPY to another host", method: "COPY", path: "/own.txt", dest: "http://elsewhere.example/f.txt", hdr: ow("T")},
		{name: "COPY to another scheme", method: "COPY", path: "/own.txt", dest: "https://$HOST/f.txt", hdr: ow("T")},
		{name: "COPY to a URI with userinfo", method: "COPY", path: "/own.txt", dest: "http://u@$HOST/f.txt", hdr: ow("T")},
		{name: "COPY to a URI with a query", method: "COPY", path: "/own.txt", dest: "http://$HOST/f.txt?x", hdr: ow("T")},
		{name: "COPY to a URI with a fragment", method: "COPY", path: "/own.txt", dest: "http://$HOST/f.txt#x", hdr: ow("T")},
		{name: "COPY to a URI in angle brackets", method: "COPY", path: "/own.txt", dest: "<http://$HOST/f.txt>", hdr: ow("T")},
		{name: "COPY to a URI after spaces", method: "COPY", path: "/own.txt", dest: "   http://$HOST/f.txt", hdr: ow("T")},
		{name: "COPY to the host in capitals", method: "COPY", path: "/own.txt", dest: "HTTP://$HOST/f.txt", hdr: ow("T")},
		{name: "COPY without a Destination", method: "COPY", path: "/own.txt"},
		{name: "COPY from a victim", method: "COPY", path: "/c/", dest: "http://$HOST/own/c2/"},
		{name: "COPY through .. in the source", method: "COPY", path: "/own/../own.txt", dest: "http://$HOST/own/../f.txt", hdr: ow("T")},

		// MOVE.
		{name: "MOVE onto a victim", method: "MOVE", path: "/own.txt", dest: "http://$HOST/f.txt", hdr: ow("T")},
		{name: "MOVE a victim away", method: "MOVE", path: "/f.txt", dest: "http://$HOST/own/f.txt"},
		{name: "MOVE a collection onto a collection", method: "MOVE", path: "/own/", dest: "http://$HOST/c/", hdr: ow("T")},
		{name: "MOVE a collection away", method: "MOVE", path: "/c/", dest: "http://$HOST/own/c/"},
		{name: "MOVE a collection without its slash", method: "MOVE", path: "/c", dest: "http://$HOST/own2"},
		{name: "MOVE a member away", method: "MOVE", path: "/c/m.txt", dest: "http://$HOST/own/m.txt"},
		{name: "MOVE onto a deep member", method: "MOVE", path: "/own/o.txt", dest: "http://$HOST/c/sub/n.txt", hdr: ow("T")},
		{name: "MOVE onto a collection, Overwrite F", method: "MOVE", path: "/own/", dest: "http://$HOST/d/", hdr: ow("F")},
		{name: "MOVE to c%2Fm", method: "MOVE", path: "/own.txt", dest: "http://$HOST/c%2fm.txt", hdr: ow("T")},
		{name: "MOVE to an absolute path with ..", method: "MOVE", path: "/own.txt", dest: "/own/../g.txt", hdr: ow("T")},
		{name: "MOVE to the root", method: "MOVE", path: "/own/", dest: "http://$HOST/", hdr: ow("T")},
		{name: "MOVE with two Destinations", method: "MOVE", path: "/own.txt", dest: "http://$HOST/own2.txt", hdr: map[string]string{"destination": "http://$HOST/f.txt", "Overwrite": "T"}},
		{name: "lower-case move", method: "move", path: "/own.txt", dest: "http://$HOST/f.txt", hdr: ow("T")},

		// PROPPATCH.
		{name: "PROPPATCH a victim", method: "PROPPATCH", path: "/f.txt", hdr: x, body: propBody},
		{name: "PROPPATCH a collection", method: "PROPPATCH", path: "/c/", hdr: x, body: propBody},
		{name: "PROPPATCH a collection without its slash", method: "PROPPATCH", path: "/c", hdr: x, body: propBody},
		{name: "PROPPATCH the root", method: "PROPPATCH", path: "/", hdr: x, body: propBody},
		{name: "PROPPATCH through ..", method: "PROPPATCH", path: "/own/../f.txt", hdr: x, body: propBody},
		{name: "PROPPATCH a member", method: "PROPPATCH", path: "/c/sub/n.txt", hdr: x, body: propBody},

		// LOCK and UNLOCK.
		{name: "LOCK a victim", method: "LOCK", path: "/f.txt", hdr: x, body: lockBody},
		{name: "LOCK a collection", method: "LOCK", path: "/c/", hdr: map[string]string{"Content-Type": "application/xml", "Depth": "infinity"}, body: lockBody},
		{name: "LOCK a new member", method: "LOCK", path: "/c/new.txt", hdr: x, body: lockBody},
		{name: "LOCK at the root", method: "LOCK", path: "/new-lock.txt", hdr: x, body: lockBody},
		{name: "UNLOCK a victim", method: "UNLOCK", path: "/f.txt", hdr: map[string]string{"Lock-Token": "<opaquelocktoken:00000000-0000-0000-0000-000000000000>"}},

		// PATCH, POST and what else a route may meet.
		{name: "PATCH a victim", method: "PATCH", path: "/f.txt", body: "EVIL"},
		{name: "POST a victim", method: "POST", path: "/f.txt", body: "EVIL"},
		{name: "POST a collection", method: "POST", path: "/c/", body: "EVIL"},
		{name: "an extension method", method: "FROB", path: "/f.txt", body: "EVIL"},
		{name: "ACL", method: "ACL", path: "/f.txt", hdr: x, body: `<?xml version="1.0"?><D:acl xmlns:D="DAV:"/>`},
		{name: "PROPFIND Depth infinity", method: "PROPFIND", path: "/", hdr: map[string]string{"Depth": "infinity"}},
		{name: "GET with a method override", method: "GET", path: "/f.txt", hdr: map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		{name: "OPTIONS", method: "OPTIONS", path: "/c/"},

		// The zombie's own writes: forwarded with its token.
		{name: "own PUT", method: "PUT", path: "/own/p.txt", body: "own", own: true},
		{name: "own MKCOL", method: "MKCOL", path: "/own/sub/", own: true},
		{name: "own COPY", method: "COPY", path: "/own.txt", dest: "http://$HOST/own/copy.txt", own: true},
		{name: "own MOVE", method: "MOVE", path: "/own/o.txt", dest: "http://$HOST/own/moved.txt", own: true},
		{name: "own DELETE", method: "DELETE", path: "/own/", own: true},
		{name: "own PUT at the root", method: "PUT", path: "/new.txt", body: "own", own: true},
	}
	return s
}

// davServerFor starts the named DAV server (apache or nginx).
func davServerFor(t testing.TB, name string) davServer {
	t.Helper()
	if name == "nginx" {
		n := testenv.Nginx(t)
		return davServer{name: "nginx", url: n.URL, root: n.Root, preserveHost: true}
	}
	a := testenv.Apache(t)
	return davServer{name: "apache", url: a.URL, root: a.Root}
}

// davSend sends s to addr (host:port) byte for byte with token and
// returns the answer's status and body; an error if the server closed
// the connection without one.
func davSend(addr string, s davShape, token int64) (int, string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(davWire(s, addr, token)); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: s.method})
	if err != nil {
		return 0, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), nil
}

// davWire is s as the bytes of an HTTP/1.1 request to host.
func davWire(s davShape, host string, token int64) []byte {
	var b bytes.Buffer
	sub := func(v string) string { return strings.ReplaceAll(v, "$HOST", host) }
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", s.method, sub(s.path), host)
	if token > 0 {
		fmt.Fprintf(&b, "Fencing-Token: %d\r\n", token)
	}
	if s.dest != "" {
		fmt.Fprintf(&b, "Destination: %s\r\n", sub(s.dest))
	}
	keys := make([]string, 0, len(s.hdr))
	for k := range s.hdr {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\r\n", k, sub(s.hdr[k]))
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(s.body), s.body)
	return b.Bytes()
}

// davSeed writes the seeded tree through addr (the gateway, or the
// server): the victims and collections with token 100, each collection's
// member tree fenced at 100 by a DELETE of it with that token before it is
// made again; dead properties on a file and a collection (Apache); the
// zombie's own resources with token 5.
func davSeed(t testing.TB, addr string) {
	t.Helper()
	step := func(method, path string, token int64, body string, ok ...int) {
		t.Helper()
		s := davShape{method: method, path: path, body: body}
		if method == "PROPPATCH" {
			s.hdr = map[string]string{"Content-Type": "application/xml"}
		}
		st, b, err := davSend(addr, s, token)
		if err != nil || (st/100 != 2 && !slices.Contains(ok, st)) {
			t.Fatalf("seed: %s %s with %d: %d %s %v", method, path, token, st, b, err)
		}
	}
	for _, c := range davColls {
		step("MKCOL", c, davHigh, "")
		step("DELETE", c, davHigh, "")
		step("MKCOL", c, davHigh, "")
	}
	for _, v := range davVictims {
		step("PUT", v, davHigh, "victim "+v)
	}
	// nginx has no PROPPATCH (405).
	step("PROPPATCH", "/f.txt", davHigh, propBody, http.StatusMethodNotAllowed)
	step("PROPPATCH", "/c/", davHigh, propBody, http.StatusMethodNotAllowed)
	if err := davOwnSeed(addr); err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// davOwnSeed writes the zombie's own resources with token 5 (again),
// and returns the first failure (a 405 is a MKCOL of a collection that
// is there).
func davOwnSeed(addr string) error {
	for _, s := range []davShape{{method: "PUT", path: "/own.txt", body: "own"}, {method: "MKCOL", path: "/own/"},
		{method: "PUT", path: "/own/o.txt", body: "own o"}} {
		if st, b, err := davSend(addr, s, davLow); err != nil || (st/100 != 2 && st != http.StatusMethodNotAllowed) {
			return fmt.Errorf("%s %s with %d: %d %.200s %v", s.method, s.path, davLow, st, b, err)
		}
	}
	return nil
}

// davTree is a DAV server's served tree, by the resource path each entry
// belongs to: "/a/b" (a file: its content's hash and mode; a directory:
// "dir", its times left out: an entry added below changes them),
// "/a/b#props" (Apache's dead properties of /a/b, in .DAV/b of its
// directory, or .DAV/.state_for_dir of a collection's own), and
// "/a/.locknull" (Apache's list of lock-null resources in /a).
//
// Paths are spelled as the gateway's keys are (resource.JoinPath: each
// segment escaped), so that they compare with its admissions. A server
// whose root was removed (a DELETE or MOVE onto "/") has an empty tree.
func davTree(t testing.TB, s davServer) map[string]string {
	t.Helper()
	tree := map[string]string{}
	apache := s.name == "apache" // nginx has no .DAV: it is a collection there
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) && p == s.root {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.root, p)
		var segs []string
		if rel != "." {
			segs = strings.Split(filepath.ToSlash(rel), "/")
		}
		res := resource.JoinPath(segs, false)
		n := len(segs)
		switch {
		case apache && d.IsDir() && n > 0 && segs[n-1] == ".DAV":
			return nil
		case d.IsDir():
			tree[res] = "dir"
			return nil
		case apache && n > 1 && segs[n-2] == ".DAV":
			owner := resource.JoinPath(segs[:n-2], false)
			switch segs[n-1] {
			case ".state_for_dir":
				res = owner + "#props"
			case ".locknull":
				res = strings.TrimSuffix(owner, "/") + "/.locknull"
			default:
				res = resource.JoinPath(append(segs[:n-2:n-2], segs[n-1]), false) + "#props"
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tree[res] = fmt.Sprintf("%s %v %d bytes", hex.EncodeToString(sum[:8]), info.Mode().Perm(), len(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// davChanged lists the entries that differ between two trees, sorted.
func davChanged(before, after map[string]string) []string {
	var ch []string
	for k, v := range before {
		if after[k] != v {
			ch = append(ch, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			ch = append(ch, k)
		}
	}
	sort.Strings(ch)
	return ch
}

// recordingFence admits every write and records it: the fences the
// gateway admits a request on are its classification of the request.
type recordingFence struct{ writes []gateway.Write }

type nopPermit struct{}

func (nopPermit) Release() {}

func (f *recordingFence) Admit(_ context.Context, w gateway.Write) (gateway.Permit, error) {
	f.writes = append(f.writes, w)
	return nopPermit{}, nil
}

func (f *recordingFence) State(context.Context, string) (fencegate.FenceState, error) {
	return fencegate.FenceState{}, nil
}

func (f *recordingFence) Advance(context.Context, string, int64, string) (fencegate.FenceState, error) {
	return fencegate.FenceState{}, nil
}

// markUpstream answers 204 and records that the request got to it.
type markUpstream struct{ forwarded bool }

func (u *markUpstream) Forward(w http.ResponseWriter, _ *http.Request, _ *gateway.Request) error {
	u.forwarded = true
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// davClassifier is the gateway's classification of WebDAV requests on a
// {path} route, with the route's options as configured.
type davClassifier struct {
	fence *recordingFence
	up    *markUpstream
	gw    *gateway.Gateway
}

func newDAVClassifier(t testing.TB, opts gateway.RouteOptions) *davClassifier {
	t.Helper()
	c := &davClassifier{fence: &recordingFence{}, up: &markUpstream{}}
	c.gw = gateway.New(c.fence, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	rt, err := gateway.NewRoute(opts, c.up)
	if err != nil {
		t.Fatal(err)
	}
	c.gw.SetRoutes([]*gateway.Route{rt})
	return c
}

// classify runs s (as the gateway's server reads it off the wire) through
// the gateway: the writes it admits it on, or refused (nil, false).
func (c *davClassifier) classify(s davShape) ([]gateway.Write, bool) {
	const host = "gateway.test"
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(davWire(s, host, davLow))))
	if err != nil {
		return nil, false // the gateway's server answers 400
	}
	req.RemoteAddr = "127.0.0.1:1"
	c.fence.writes, c.up.forwarded = nil, false
	c.gw.ServeHTTP(httptest.NewRecorder(), req)
	return c.fence.writes, c.up.forwarded
}

// davCovered reports whether the admissions cover a change of the tree
// entry k: its resource path's own fence (ScopeKey or ScopeTree on it)
// or a tree fence above it. A lock-null list is covered by an admission
// of a member of its collection; a directory created or removed is
// covered too when it is above a path an admission covers (a server that
// makes a PUT's missing parents, nginx's create_full_put_path).
func davCovered(k string, adms []gateway.Write, created bool) bool {
	p := strings.TrimSuffix(k, "#props")
	keyCovers := func(p string) bool {
		for _, a := range adms {
			switch {
			case a.Scope != gateway.ScopeMember && a.Resource == p:
				return true
			case a.Scope == gateway.ScopeTree && strings.HasPrefix(p, resource.MemberPrefix(a.Resource)):
				return true
			}
		}
		return false
	}
	if keyCovers(p) {
		return true
	}
	if coll, ok := strings.CutSuffix(p, "/.locknull"); ok {
		for _, a := range adms {
			if a.Scope != gateway.ScopeMember && path2parent(a.Resource) == coll+"/" {
				return true
			}
		}
		return false
	}
	if created {
		for _, a := range adms {
			if a.Scope != gateway.ScopeMember && strings.HasPrefix(a.Resource, p+"/") {
				return true
			}
		}
	}
	return false
}

// path2parent is the collection path ("/a/") of a key ("/a/b").
func path2parent(k string) string {
	i := strings.LastIndexByte(strings.TrimSuffix(k, "/"), '/')
	return k[:i+1]
}

// davRoutes are the route configurations of the oracle: the one
// e2e/dav_test.go uses (COPY and MOVE named: hierarchical, strict) and
// the default fenced_methods.
func davRoutes() map[string]gateway.RouteOptions {
	return map[string]gateway.RouteOptions{
		"declared": {Name: "dav", PathPrefix: "/", Resource: "{path}",
			FencedMethods: []string{"PUT", "POST", "DELETE", "PATCH", "COPY", "MOVE", "MKCOL", "PROPPATCH", "LOCK", "UNLOCK"}},
		"default": {Name: "dav", PathPrefix: "/", Resource: "{path}"},
	}
}

// TestDAVWriteSetWhiteBox sends each shape straight to Apache mod_dav and
// nginx DAV on a fresh copy of the seeded tree, and checks that the
// gateway's classification of the same request (both route
// configurations) covers every entry of the tree the server changed, or
// refuses it.
func TestDAVWriteSetWhiteBox(t *testing.T) {
	corpus := davCorpus()
	if len(corpus) < 60 {
		t.Fatalf("the corpus has %d shapes; the oracle wants at least 60", len(corpus))
	}
	for _, name := range []string{"apache", "nginx"} {
		t.Run(name, func(t *testing.T) {
			s := davServerFor(t, name)
			addr := strings.TrimPrefix(s.url, "http://")
			davSeed(t, addr)
			seed := filepath.Join(t.TempDir(), "seed")
			copyTree(t, s.root, seed)
			lockSeed := filepath.Join(t.TempDir(), "locks")
			copyTree(t, filepath.Dir(s.root), lockSeed)
			seeded := davTree(t, s)
			routes := davRoutes()
			classifiers := map[string]*davClassifier{}
			for rn, o := range routes {
				classifiers[rn] = newDAVClassifier(t, o)
			}
			changedShapes, accepted := 0, 0
			for _, sh := range corpus {
				restoreRoot(t, seed, s.root)
				restoreLocks(t, lockSeed, filepath.Dir(s.root))
				st, body, err := davSend(addr, sh, davLow)
				after := davTree(t, s)
				changed := davChanged(seeded, after)
				if len(changed) == 0 {
					continue
				}
				changedShapes++
				for rn, c := range classifiers {
					adms, forwarded := c.classify(sh)
					if !forwarded {
						continue // refused: covers whatever the server would do
					}
					accepted++
					for _, k := range changed {
						_, existed := seeded[k]
						if !davCovered(k, adms, !existed || after[k] == "") {
							t.Errorf("%s (route %s): %s %s (Destination %q) changed %s on %s (answer %d %.200s %v), which the gateway's admissions %v do not cover",
								sh.name, rn, sh.method, sh.path, sh.dest, k, name, st, body, err, davAdms(adms))
						}
					}
				}
			}
			if changedShapes < 20 || accepted < 10 {
				t.Fatalf("%d shapes changed the tree sent straight to %s, %d classifications accepted one: the oracle lost its subject", changedShapes, name, accepted)
			}
			t.Logf("%d of %d shapes changed %s's tree; %d classifications (of 2 routes) accepted one and covered it", changedShapes, len(corpus), name, accepted)
		})
	}
}

// davAdms prints admissions as key/scope.
func davAdms(ws []gateway.Write) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = fmt.Sprintf("%s/%d", w.Resource, w.Scope)
	}
	return out
}

// restoreLocks puts Apache's lock database (davlock* beside the served
// directory) back as the seed held it.
func restoreLocks(t *testing.T, seed, dir string) {
	t.Helper()
	old, _ := filepath.Glob(filepath.Join(dir, "davlock*"))
	for _, f := range old {
		os.Remove(f)
	}
	saved, _ := filepath.Glob(filepath.Join(seed, "davlock*"))
	for _, f := range saved {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(f); err == nil {
			chownLike(dst, fi)
		}
	}
}

// davStaleAllowed reports whether the zombie (token 5) may have changed
// tree entry k: its own resources, or a new entry outside the seeded
// collections (nobody's: at the root, or below a new collection).
func davStaleAllowed(k string, seeded map[string]string) bool {
	p := strings.TrimSuffix(k, "#props")
	if davOwn(p) {
		return true
	}
	if _, ok := seeded[k]; ok {
		return false
	}
	for _, c := range davColls {
		if strings.HasPrefix(p, c) || p+"/" == c {
			return false
		}
	}
	return true
}

// TestDAVWriteSetOracle is the black-box form: the tree is seeded through
// the gateway with token 100 (each collection's member tree too), and each
// shape is sent through the gateway with token 5. Nothing seeded may
// change: no file, directory, dead property or lock-null list of it; the
// zombie may write its own resources and new ones outside the seeded
// collections.
func TestDAVWriteSetOracle(t *testing.T) {
	corpus := davCorpus()
	for _, name := range []string{"apache", "nginx"} {
		for _, rn := range []string{"declared", "default"} {
			t.Run(name+"/"+rn, func(t *testing.T) {
				s := davServerFor(t, name)
				route := davRouteYAML(s, "")
				if rn == "default" {
					route = strings.Replace(route, davFenced, "", 1)
				}
				p := startFencegate(t, httpGatewayYAML(route))
				gw := p.addrs["gateway"]
				davSeed(t, gw)
				seeded := davTree(t, s)
				forwarded := 0
				for _, sh := range corpus {
					before := davTree(t, s)
					st, body, err := davSend(gw, sh, davLow)
					if err == nil && refusalCode(body) == "" {
						forwarded++
					} else if sh.own {
						t.Errorf("%s: %s %s with the zombie's token %d on its own resources: %d %.200s %v; want it forwarded",
							sh.name, sh.method, sh.path, davLow, st, body, err)
					}
					after := davTree(t, s)
					for _, k := range davChanged(before, after) {
						if !davStaleAllowed(k, seeded) {
							t.Errorf("%s: %s %s (Destination %q) with token %d changed the seeded %s on %s (%q -> %q; answer %d %.200s %v)",
								sh.name, sh.method, sh.path, sh.dest, davLow, k, name, before[k], after[k], st, body, err)
						}
					}
					if err := davOwnSeed(gw); err != nil {
						t.Fatalf("after %s: the zombie's own resources: %v", sh.name, err)
					}
				}
				// The owner's write with the current token lands.
				if st, body, err := davSend(gw, davShape{method: "PUT", path: "/f.txt", body: "owner"}, davHigh); err != nil || st/100 != 2 {
					t.Fatalf("the owner's PUT /f.txt with %d: %d %s %v", davHigh, st, body, err)
				}
				if got := davFile(t, s, "f.txt"); got != "owner" {
					t.Fatalf("f.txt = %q after the owner's PUT", got)
				}
				t.Logf("%d of %d shapes forwarded with token %d, none changed the seeded tree", forwarded, len(corpus), davLow)
			})
		}
	}
}

// chownLike gives path the owner of fi (the server's user may have to
// write it).
func chownLike(path string, fi os.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		os.Chown(path, int(st.Uid), int(st.Gid))
	}
}

// restoreRoot is restoreTree for a served directory that a request may
// have removed or replaced (a DELETE or MOVE onto "/").
func restoreRoot(t *testing.T, seed, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		fi, err := os.Stat(seed)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		chownLike(dir, fi)
	}
	restoreTree(t, seed, dir)
}

// FuzzDAVOracle generates WebDAV requests from the corpus (its seeds):
// method, raw request target, Destination, header lines and body are the
// fuzzer's. Each is sent with token 5 through an in-process gateway to a
// DAV server (FUZZ_DAV_SERVER: apache, the default, or nginx) whose tree
// was seeded with token 100; nothing seeded may change (davStaleAllowed:
// the zombie may write its own resources and new ones outside the seeded
// collections).
//
//	CI=true go test ./e2e -run '^$' -fuzz '^FuzzDAVOracle$' -fuzztime 10m -parallel 1
func FuzzDAVOracle(f *testing.F) {
	for _, s := range davCorpus() {
		var hdr strings.Builder
		keys := make([]string, 0, len(s.hdr))
		for k := range s.hdr {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			hdr.WriteString(k + ": " + s.hdr[k] + "\n")
		}
		f.Add(s.method, s.path, s.dest, hdr.String(), s.body)
	}
	if testing.Short() {
		f.Skip("starts a DAV server and the gateway")
	}
	name := os.Getenv("FUZZ_DAV_SERVER")
	if name == "" {
		name = "apache"
	}
	s := davServerFor(f, name)
	gw := strings.TrimPrefix(inProcessGateway(f, httpGatewayYAML(davRouteYAML(s, ""))), "http://")
	davSeed(f, gw)
	seeded := davTree(f, s)
	f.Fuzz(func(t *testing.T, method, path, dest, hdr, body string) {
		sh := davShape{name: "fuzzed", method: method, path: path, dest: dest, body: body, hdr: map[string]string{}}
		for _, l := range strings.Split(hdr, "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok {
				sh.hdr[k] = v
			}
		}
		if !davSendable(sh) {
			return
		}
		before := davTree(t, s)
		st, answer, err := davSend(gw, sh, davLow)
		now := davTree(t, s)
		for _, k := range davChanged(before, now) {
			if !davStaleAllowed(k, seeded) {
				t.Fatalf("%q %q (Destination %q, headers %q, body %q) with token %d changed the seeded %s (%q -> %q; answer %d %.200s %v)",
					method, path, dest, hdr, body, davLow, k, before[k], now[k], st, answer, err)
			}
		}
		davOwnSeed(gw) // best effort: a fuzzed lock may hold them
	})
}

// davSendable reports whether a fuzzed shape is one HTTP/1.1 request as
// written: a method token, a request target and header fields without
// spaces or line breaks where they end a field, framing and the token
// left to the oracle.
func davSendable(s davShape) bool {
	if s.method == "" || s.path == "" || len(s.body) > 1<<16 || strings.Trim(s.method, headerNameBytes) != "" {
		return false
	}
	for _, c := range []byte(s.path) {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	for k, v := range s.hdr {
		switch http.CanonicalHeaderKey(k) {
		case "Fencing-Token", "Content-Length", "Transfer-Encoding", "Host", "Connection", "Expect", "Upgrade", "Trailer", "Te":
			return false
		}
		if k == "" || !validHeader(k, v) {
			return false
		}
	}
	return validHeader("Destination", s.dest)
}
