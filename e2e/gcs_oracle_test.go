package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The write-set oracle of GCS routes, black-box: every object is fenced at
// 100 through the gateway, each request shape of the corpus is sent with
// token 5, and the store's whole state (buckets, objects with their
// content, metadata, generations and ACLs; on the filesystem backend, every
// file under its directory) must not change, except the objects token 5
// owns. The shapes are every write of the JSON API and the encodings that
// made the gateway and the store read one request two ways.

const (
	oracleHigh = 100 // the fences of every seeded object
	oracleLow  = 5   // the attacker's token, which owns gcsOwn only
)

// gcsOwn are the objects (in gcsBucket) token 5 owns: a write of them
// through the gateway is legitimate, a change of anything else is not.
var gcsOwn = []string{"own", "own2"}

// gcsVictims are the objects fenced at 100, bucket/name. Their names are
// those the shapes' other readings write: literally "t/acl/e",
// "m/moveTo/o/d", and in bucket "storage", where fake-gcs-server puts an
// upload or delete on a path its JSON API router does not match.
var gcsVictims = []string{
	"fenced/victim", "fenced/dir/job", "fenced/t/acl/e", "fenced/m/moveTo/o/d",
	"fenced/cs/copyTo/b/fenced/o", "other/victim", "storage/victim",
	"storage/v1/b/fenced/defaultObjectAcl/allUsers", "upload/victim",
}

// gcsBuckets are the oracle's buckets: "storage" and "upload" are where
// fake-gcs-server puts a write on a path its JSON API router does not
// match.
var gcsBuckets = []string{gcsBucket, "other", "storage", "upload"}

// gcsOracle is a fake-gcs-server with the oracle's buckets and objects and
// a gateway in front.
type gcsOracle struct {
	srv     *testenv.GCSServer
	backend string
	gw      string
	dir     string // the filesystem backend's directory's parent ("" in memory)
	// accepted counts the shapes that changed the store and that the
	// gateway's classification accepts (the white-box oracle's subject).
	accepted int
}

func startGCSOracle(t testing.TB, backend, precondition string) *gcsOracle {
	t.Helper()
	o := startGCSStore(t, backend)
	p := startFencegate(t, s3GatewayYAML(gcsRouteYAML("objects", "", o.srv.Endpoint, precondition, "30s")))
	o.gw = p.URL("gateway")
	o.seed(t, o.gw)
	return o
}

// startGCSStore starts fake-gcs-server with the oracle's buckets, and no
// gateway (gw is "" until one is started).
func startGCSStore(t testing.TB, backend string) *gcsOracle {
	t.Helper()
	srv := testenv.FakeGCSBackend(t, backend)
	for _, b := range gcsBuckets {
		srv.CreateBucket(t, b)
	}
	o := &gcsOracle{srv: srv, backend: backend}
	if srv.Root != "" {
		o.dir = filepath.Dir(srv.Root)
	}
	return o
}

// seed writes the victims with token 100 and token 5's own objects with
// token 5, through base (the gateway, which fences them; or the store).
func (o *gcsOracle) seed(t testing.TB, base string) {
	t.Helper()
	for _, v := range gcsVictims {
		b, n, _ := strings.Cut(v, "/")
		o.put(t, base, b, n, oracleHigh, "victim content of "+v)
	}
	for _, n := range gcsOwn {
		o.put(t, base, gcsBucket, n, oracleLow, "own content")
	}
	srv := o.srv
	backend := o.backend
	if backend == "memory" {
		// An object whose name ends in "/", written around the gateway
		// (which refuses such names): a filesystem backend has no such
		// object, it is "sl" there.
		resp, body := srv.Do(t, http.MethodPost, "/upload/storage/v1/b/"+gcsBucket+"/o?uploadType=media&name=sl%2F", "slash")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("seed sl/: %s %s", resp.Status, body)
		}
	}
}

// put writes bucket/name through base with token (a multipart upload,
// stamped, and fenced at token when base is the gateway).
func (o *gcsOracle) put(t testing.TB, base, bucket, name string, token int64, content string) {
	t.Helper()
	ct, body := gcsMultipart(`{"name":`+jsonString(name)+`}`, content)
	resp, b := o.sendAt(t, base, gcsShape{method: http.MethodPost,
		path: "/upload/storage/v1/b/" + bucket + "/o?uploadType=multipart&name=" + url.QueryEscape(name),
		ct:   ct, body: body}, token)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("seed %s/%s with token %d: %s %s", bucket, name, token, resp.Status, b)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// gcsMultipart is a multipart/related upload body: metadata, then media.
func gcsMultipart(meta, media string) (string, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.SetBoundary("fencegate-oracle-boundary") // one Content-Type for every body
	p, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/json; charset=UTF-8"}})
	p.Write([]byte(meta))
	p, _ = mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"text/plain"}})
	p.Write([]byte(media))
	mw.Close()
	return "multipart/related; boundary=" + mw.Boundary(), b.String()
}

// gcsShape is one request of the corpus, as it goes on the wire.
type gcsShape struct {
	name   string
	fix    int    // the item of the fix list it belongs to (0: a write the table always had)
	method string // sent as is (no canonicalisation)
	path   string // raw path and query, as sent
	ct     string
	hdr    map[string]string
	body   string
	// session: the answer's session URL, if it is the gateway's, gets
	// the upload's content with the same token (the attack completes).
	session bool
	// onSession: path is appended to the URL of a session token 5 opens
	// on gcsBucket/own first (a request on an open session).
	onSession bool
	// own: the request may be forwarded, as a write of token 5's own
	// object; only the store's state is checked.
	own bool
}

// send sends a shape to the gateway with the worker's key and token; a
// session it opens is completed.
func (o *gcsOracle) send(t testing.TB, s gcsShape, token int64) (*http.Response, string) {
	t.Helper()
	return o.sendAt(t, o.gw, s, token)
}

// sendAt sends a shape to base (the gateway, or the store itself).
func (o *gcsOracle) sendAt(t testing.TB, base string, s gcsShape, token int64) (*http.Response, string) {
	t.Helper()
	req, err := s.request(base)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	req.Header.Set("Authorization", "Bearer "+gcsWorkerKey)
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	if s.onSession {
		resp, body := o.sendAt(t, base, gcsShape{method: http.MethodPost,
			path: "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType=resumable&name=own",
			ct:   "application/json", body: `{"name":"own"}`}, token)
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(loc, base) {
			t.Fatalf("open own session: %s %s", resp.Status, body)
		}
		p, q, _ := strings.Cut(strings.TrimPrefix(loc, base)+s.path, "?")
		req.URL.Opaque, req.URL.RawQuery = p, q
	}
	resp, err := gcsOracleClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %s %q: %v", s.name, s.method, s.path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); s.session && resp.StatusCode == http.StatusOK && strings.HasPrefix(loc, base+"/") {
		o.sendAt(t, base, gcsShape{name: s.name + " (content)", method: http.MethodPut, path: strings.TrimPrefix(loc, base),
			hdr: map[string]string{"Content-Range": "bytes 0-3/4"}, body: "EVIL"}, token)
	}
	return resp, string(b)
}

// gcsOracleClient bounds each request: a request that hangs is a finding
// (with its shape), not a stuck run.
var gcsOracleClient = &http.Client{Timeout: 30 * time.Second}

// request is the shape as an HTTP request to base, path and method as
// they are (no canonicalisation).
func (s gcsShape) request(base string) (*http.Request, error) {
	p, q, _ := strings.Cut(s.path, "?")
	req, err := http.NewRequest(http.MethodGet, base, strings.NewReader(s.body))
	if err != nil {
		return nil, err
	}
	req.Method = s.method
	req.URL.Opaque, req.URL.RawQuery = p, q
	if s.ct != "" {
		req.Header.Set("Content-Type", s.ct)
	}
	for k, v := range s.hdr {
		req.Header[k] = []string{v}
	}
	return req, nil
}

// snapshot is the store's whole state, key -> value.
type snapshot map[string]string

// snapshot reads the store's state straight from fake-gcs-server (and
// its directory, on the filesystem backend).
func (o *gcsOracle) snapshot(t testing.TB) snapshot {
	t.Helper()
	s := snapshot{}
	get := func(path string, v any) []byte {
		t.Helper()
		resp, b := o.srv.Do(t, http.MethodGet, path, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("snapshot: GET %s: %s %s", path, resp.Status, b)
		}
		if v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("snapshot: GET %s: %v", path, err)
			}
		}
		return b
	}
	var buckets struct{ Items []struct{ Name string } }
	get("/storage/v1/b", &buckets)
	for _, b := range buckets.Items {
		var bucket map[string]any
		get("/storage/v1/b/"+url.PathEscape(b.Name), &bucket)
		if o.dir != "" {
			// The filesystem backend's bucket times are its directory's,
			// which any write of an object in it changes.
			delete(bucket, "timeCreated")
			delete(bucket, "updated")
		}
		doc, _ := json.Marshal(bucket)
		s["bucket "+b.Name] = string(doc)
		var list struct {
			Items []map[string]any
		}
		get("/storage/v1/b/"+url.PathEscape(b.Name)+"/o?versions=true&projection=full", &list)
		for _, it := range list.Items {
			name, _ := it["name"].(string)
			doc, _ := json.Marshal(it)
			k := b.Name + "/" + name
			s["object "+k] = string(doc)
			// Read by name, as far as the store serves it (a name the
			// JSON API cannot address, such as "", is its listing only).
			op := "/storage/v1/b/" + url.PathEscape(b.Name) + "/o/" + url.PathEscape(name)
			resp, content := o.srv.Do(t, http.MethodGet, op+"?alt=media", "")
			sum := sha256.Sum256(content)
			s["content "+k] = resp.Status + " " + hex.EncodeToString(sum[:])
			resp, acl := o.srv.Do(t, http.MethodGet, op+"/acl", "")
			s["acl "+k] = resp.Status + " " + string(acl)
		}
	}
	if o.dir != "" {
		filepath.WalkDir(o.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(o.dir, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			x := make([]byte, 64<<10)
			n, _ := syscall.Getxattr(p, "user.metadata", x)
			s["file "+rel] = hex.EncodeToString(sum[:]) + " " + string(x[:max(n, 0)])
			return nil
		})
	}
	return s
}

// owned reports whether a snapshot key is state token 5 may change.
func (o *gcsOracle) owned(k string) bool {
	_, what, _ := strings.Cut(k, " ")
	for _, n := range gcsOwn {
		own := gcsBucket + "/" + n
		if what == own || (o.dir != "" && strings.HasPrefix(k, "file ") &&
			(what == filepath.Join(filepath.Base(o.srv.Root), own) || what == filepath.Join(filepath.Base(o.srv.Root), own)+".metadata")) {
			return true
		}
	}
	return false
}

// changes lists what differs between two snapshots, but for owned state.
func (o *gcsOracle) changes(before, after snapshot) []string {
	var out []string
	for k, v := range before {
		if o.owned(k) {
			continue
		}
		if w, ok := after[k]; !ok {
			out = append(out, "removed "+k)
		} else if w != v {
			out = append(out, fmt.Sprintf("changed %s: %.300s -> %.300s", k, v, w))
		}
	}
	for k, w := range after {
		if _, ok := before[k]; !ok && !o.owned(k) {
			out = append(out, fmt.Sprintf("added %s: %.300s", k, w))
		}
	}
	slices.Sort(out)
	return out
}

// refused sends a shape with token 5 and fails the test unless it was
// refused and the store's state, but for token 5's own objects, is
// unchanged.
func (o *gcsOracle) refused(t *testing.T, s gcsShape, before snapshot) snapshot {
	t.Helper()
	resp, body := o.send(t, s, oracleLow)
	after := o.snapshot(t)
	if ch := o.changes(before, after); len(ch) > 0 {
		t.Errorf("%s: %s %s with token %d changed the store (answer %s %.300s):\n  %s",
			s.name, s.method, s.path, oracleLow, resp.Status, body, strings.Join(ch, "\n  "))
	}
	if resp.StatusCode < 400 && !s.own {
		t.Errorf("%s: %s %s with token %d answered %s %.300s; want a refusal", s.name, s.method, s.path, oracleLow, resp.Status, body)
	}
	return after
}

// gcsCorpus is the oracle's corpus: every write of the JSON API aimed at
// an object fenced at 100, and the requests that read two ways.
func gcsCorpus() []gcsShape {
	const up = "/upload/storage/v1/b/" + gcsBucket + "/o?"
	const ob = "/storage/v1/b/" + gcsBucket + "/o/"
	const js = "application/json"
	mpCT, mpVictim := gcsMultipart(`{"name":"victim"}`, "EVIL")
	_, mpOwnNamesVictim := gcsMultipart(`{"name":"victim"}`, "EVIL")
	_, mpOwnNamesOther := gcsMultipart(`{"bucket":"other","name":"victim"}`, "EVIL")
	_, mpOwnUpper := gcsMultipart(`{"NAME":"victim","BUCKET":"other"}`, "EVIL")
	_, mpEmpty := gcsMultipart(`{}`, "EVIL")
	qp := strings.Replace(mpOwnNamesVictim, "Content-Type: application/json; charset=UTF-8", "Content-Transfer-Encoding: quoted-printable\r\nContent-Type: application/json", 1)
	qp = strings.Replace(qp, `{"name":"victim"}`, `{"n=61me":"victim","bucket":"oth=65r"}`, 1)
	acl := `{"entity":"allUsers","role":"OWNER"}`
	s := []gcsShape{
		// 0: each write of the table on a victim.
		{name: "media upload", method: "POST", path: up + "uploadType=media&name=victim", ct: "text/plain", body: "EVIL"},
		{name: "multipart upload", method: "POST", path: up + "uploadType=multipart&name=victim", ct: mpCT, body: mpVictim},
		{name: "resumable upload", method: "POST", path: up + "uploadType=resumable&name=victim", ct: js, body: `{}`, session: true},
		{name: "patch", method: "PATCH", path: ob + "victim", ct: js, body: `{"metadata":{"x":"y"}}`},
		{name: "update", method: "PUT", path: ob + "victim", ct: js, body: `{"contentType":"x/y"}`},
		{name: "delete", method: "DELETE", path: ob + "victim"},
		{name: "acl insert", method: "POST", path: ob + "victim/acl", ct: js, body: acl},
		{name: "acl update", method: "PUT", path: ob + "victim/acl/allUsers", ct: js, body: acl},
		{name: "acl delete", method: "DELETE", path: ob + "victim/acl/allUsers"},
		{name: "compose", method: "POST", path: ob + "victim/compose", ct: js, body: `{"sourceObjects":[{"name":"own"}]}`},
		{name: "copyTo", method: "POST", path: ob + "own/copyTo/b/fenced/o/victim", ct: js, body: `{}`},
		{name: "rewriteTo", method: "POST", path: ob + "own/rewriteTo/b/fenced/o/victim", ct: js, body: `{}`},
		{name: "copyTo another bucket", method: "POST", path: ob + "own/copyTo/b/other/o/victim", ct: js},
		{name: "moveTo", method: "POST", path: ob + "own/moveTo/o/victim"},
		{name: "moveTo from a victim", method: "POST", path: ob + "victim/moveTo/o/own2"},
		{name: "delete with a %2F name", method: "DELETE", path: ob + "dir%2Fjob"},
		{name: "bucket patch", method: "PATCH", path: "/storage/v1/b/" + gcsBucket, ct: js, body: `{"labels":{"x":"y"}}`},
		{name: "bucket update", method: "PUT", path: "/storage/v1/b/" + gcsBucket, ct: js, body: `{"labels":{"x":"y"}}`},
		{name: "bucket delete", method: "DELETE", path: "/storage/v1/b/upload"},
		{name: "bucket acl insert", method: "POST", path: "/storage/v1/b/" + gcsBucket + "/acl", ct: js, body: acl},
		{name: "bucket acl update", method: "PUT", path: "/storage/v1/b/" + gcsBucket + "/acl/allUsers", ct: js, body: acl},
		{name: "bucket notification", method: "POST", path: "/storage/v1/b/" + gcsBucket + "/notificationConfigs", ct: js, body: `{"topic":"t"}`},
		{name: "bucket insert", method: "POST", path: "/storage/v1/b", ct: js, body: `{"name":"newbucket"}`},
		{name: "batch", method: "POST", path: "/batch/storage/v1", ct: "multipart/mixed; boundary=x", body: "--x--"},
		{name: "XML API put", method: "PUT", path: "/" + gcsBucket + "/victim", body: "EVIL"},
		{name: "XML API delete", method: "DELETE", path: "/" + gcsBucket + "/victim"},
		{name: "emulator's delete_all", method: "POST", path: "/_internal/delete_all"},
		{name: "emulator's resumable path", method: "PUT", path: "/upload/resumable/x", body: "EVIL"},

		// 1: a body that names another object than the path or query.
		{fix: 1, name: "resumable, body names another bucket", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"other","name":"victim"}`, session: true},
		{fix: 1, name: "resumable, body names another object", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"fenced","name":"victim"}`, session: true},
		{fix: 1, name: "resumable, body names another bucket, same name", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"other","name":"own"}`, session: true},
		{fix: 1, name: "resumable, upper-case members", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"BUCKET":"other","NAME":"victim"}`, session: true},
		{fix: 1, name: "resumable, duplicate members", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"fenced","bucket":"other","name":"own","name":"victim"}`, session: true},
		{fix: 1, name: "resumable, members in two cases", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"fenced","Bucket":"other","name":"own","Name":"victim"}`, session: true},
		{fix: 1, name: "resumable, escaped member names", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"buck\u0065t":"other","n\u0061me":"victim"}`, session: true},
		{fix: 1, name: "resumable, Kelvin sign", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"fenced","BUC\u212aET":"other","name":"own"}`, session: true},
		{fix: 1, name: "resumable, Content-Type containing JSON", method: "POST", path: up + "uploadType=resumable&name=own", ct: "text/plain; x=application/json", body: `{"bucket":"other","name":"victim"}`, session: true},
		{fix: 1, name: "resumable, JSON Content-Type in capitals", method: "POST", path: up + "uploadType=resumable&name=own", ct: "Application/JSON", body: `{"bucket":"other","name":"victim"}`, session: true},
		{fix: 1, name: "resumable, body names the bucket only", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"bucket":"fenced","nime":"victim"}`, session: true},
		{fix: 1, name: "resumable, two JSON values", method: "POST", path: up + "uploadType=resumable&name=own", ct: js, body: `{"name":"own"} {"bucket":"other","name":"victim"}`, session: true},
		{fix: 1, name: "multipart, metadata names another object", method: "POST", path: up + "uploadType=multipart&name=own", ct: mpCT, body: mpOwnNamesVictim},
		{fix: 1, name: "multipart, metadata names another bucket", method: "POST", path: up + "uploadType=multipart&name=own", ct: mpCT, body: mpOwnNamesOther},
		{fix: 1, name: "multipart, upper-case members", method: "POST", path: up + "uploadType=multipart&name=own", ct: mpCT, body: mpOwnUpper},
		{fix: 1, name: "multipart, quoted-printable metadata", method: "POST", path: up + "uploadType=multipart&name=own", ct: mpCT, body: qp},
		{fix: 1, name: "compose, destination in another bucket", method: "POST", path: ob + "own/compose", ct: js, body: `{"sourceObjects":[{"name":"own2"}],"destination":{"bucket":"other","name":"victim"}}`},
		{fix: 1, name: "compose, sourceObjects in another case", method: "POST", path: ob + "own/compose", ct: js, body: `{"SourceObjects":[{"name":"victim"}]}`},
		{fix: 1, name: "compose, sourceObjects twice", method: "POST", path: ob + "own/compose", ct: js, body: `{"sourceObjects":[{"name":"own2"}],"sourceObjects":[{"name":"victim"}]}`},
		{fix: 1, name: "compose, a source's name in two cases", method: "POST", path: ob + "own/compose", ct: js, body: `{"sourceObjects":[{"name":"own2","Name":"victim"}]}`},
		{fix: 1, name: "compose, a source in another bucket", method: "POST", path: ob + "own/compose", ct: js, body: `{"sourceObjects":[{"name":"victim","bucket":"other"}]}`, own: true},
		{fix: 1, name: "copy, body names another object", method: "POST", path: ob + "own2/copyTo/b/fenced/o/own", ct: js, body: `{"name":"victim","bucket":"other"}`},
		{fix: 1, name: "a request on a session opens another", method: "POST", onSession: true, path: "", ct: js, body: `{"bucket":"fenced","name":"victim"}`, session: true, own: true},

		// 2: paths that parse two ways.
		{fix: 2, name: "patch .../o/X/acl/E", method: "PATCH", path: ob + "t/acl/e", ct: js, body: `{"metadata":{"x":"y"}}`},
		{fix: 2, name: "post .../o/X/acl/E", method: "POST", path: ob + "t/acl/e", ct: js, body: `{"metadata":{"x":"y"}}`},
		{fix: 2, name: "post .../o/X/%61cl/E", method: "POST", path: ob + "t/%61cl/e", ct: js, body: `{"metadata":{"x":"y"}}`},
		{fix: 2, name: "moveTo read as an update", method: "POST", path: ob + "m/moveTo/o/d", ct: js, body: `{"metadata":{"x":"y"}}`},
		{fix: 2, name: "copyTo read as an ACL insert", method: "POST", path: ob + "cs/copyTo/b/fenced/o/acl", ct: js, body: acl},
		{fix: 2, name: "acl insert on a path with acl", method: "POST", path: ob + "t/acl/e/acl", ct: js, body: acl},
		{fix: 2, name: "post on an object", method: "POST", path: ob + "victim", ct: js, body: `{"metadata":{"x":"y"}}`},
		{fix: 6, name: "post on an own object", method: "POST", path: ob + "own", ct: js, body: `{"metadata":{"x":"y"}}`},

		// 3: empty condition values.
		{fix: 3, name: "empty ifGenerationMatch", method: "DELETE", path: ob + "victim?ifGenerationMatch="},
		{fix: 3, name: "empty generation", method: "DELETE", path: ob + "t%2Facl%2Fe?generation="},
		{fix: 3, name: "empty condition on an own object", method: "PATCH", path: ob + "own?ifMetagenerationMatch=", ct: js, body: `{}`},

		// 4: names a store or a filesystem backend cleans.
		{fix: 4, name: "trailing slash", method: "DELETE", path: ob + "sl/"},
		{fix: 4, name: "trailing slash, patch", method: "PATCH", path: ob + "sl/", ct: js, body: `{"metadata":{"x":"y"}}`},
		{fix: 4, name: "trailing %2F", method: "DELETE", path: ob + "victim%2F"},
		{fix: 4, name: "trailing %2F on an ACL path", method: "DELETE", path: ob + "t%2Facl%2Fe%2F"},
		{fix: 4, name: "leading %2F", method: "DELETE", path: ob + "%2Fvictim"},
		{fix: 4, name: "./ in a name", method: "DELETE", path: ob + ".%2Fvictim"},
		{fix: 4, name: "../ in a name", method: "DELETE", path: ob + "own%2F..%2Fvictim"},
		{fix: 4, name: "../ into another bucket", method: "DELETE", path: ob + "..%2Fother%2Fvictim"},
		{fix: 4, name: "// in a name", method: "DELETE", path: ob + "dir%2F%2Fjob"},
		{fix: 4, name: "compose from a cleaned source name", method: "POST", path: ob + "own/compose", ct: js, body: `{"sourceObjects":[{"name":"own2"},{"name":"own2/../victim"}]}`, own: true},
		{fix: 4, name: "copy to a cleaned name", method: "POST", path: ob + "own/copyTo/b/fenced/o/own2%2F..%2Fvictim", ct: js, body: `{}`},
		{fix: 4, name: "upload name ../", method: "POST", path: up + "uploadType=media&name=own%2F..%2Fvictim", ct: "text/plain", body: "EVIL"},
		{fix: 4, name: "upload name into another bucket", method: "POST", path: up + "uploadType=media&name=..%2Fother%2Fvictim", ct: "text/plain", body: "EVIL"},
		{fix: 4, name: "upload name ./", method: "POST", path: up + "uploadType=media&name=.%2Fvictim", ct: "text/plain", body: "EVIL"},
		{fix: 4, name: "upload name with a trailing slash", method: "POST", path: up + "uploadType=media&name=victim%2F", ct: "text/plain", body: "EVIL"},
		{fix: 4, name: "upload name with a leading slash", method: "POST", path: up + "uploadType=media&name=%2Fvictim", ct: "text/plain", body: "EVIL"},
		{fix: 4, name: "multipart name a//b", method: "POST", path: up + "uploadType=multipart&name=dir%2F%2Fjob", ct: mpCT, body: mpVictim},
		{fix: 4, name: "resumable name ../", method: "POST", path: up + "uploadType=resumable&name=own%2F..%2Fvictim", ct: js, body: `{}`, session: true},
		{fix: 4, name: "bucket ..", method: "DELETE", path: "/storage/v1/b/%2E%2E/o/victim"},
		{fix: 4, name: "empty segment", method: "DELETE", path: "/storage/v1/b/" + gcsBucket + "/o//victim"},

		// 5: parameter names in another case, duplicates in any case.
		{fix: 5, name: "name twice", method: "POST", path: up + "uploadType=multipart&name=own&name=victim", ct: mpCT, body: mpEmpty},
		{fix: 5, name: "name in two cases", method: "POST", path: up + "uploadType=multipart&name=own&Name=victim", ct: mpCT, body: mpEmpty},
		{fix: 5, name: "NAME", method: "POST", path: up + "uploadType=multipart&NAME=victim&name=own", ct: mpCT, body: mpEmpty},
		{fix: 5, name: "uploadType in two cases", method: "POST", path: up + "uploadType=multipart&uploadtype=media&name=own", ct: mpCT, body: mpEmpty},
		{fix: 5, name: "a condition in another case", method: "PATCH", path: ob + "own?ifgenerationmatch=0", ct: js, body: `{}`},
		{fix: 5, name: "upload parameters on an object path", method: "POST", path: "/storage/v1/b/" + gcsBucket + "/o?uploadType=media&name=victim", ct: "text/plain", body: "EVIL"},
		{fix: 5, name: "unknown parameter", method: "DELETE", path: ob + "victim?x-goog-algorithm=a"},
		{fix: 5, name: "upload protocol header on a bucket path", method: "PUT", path: "/storage/v1/b/" + gcsBucket, ct: js, body: `{"name":"victim"}`, hdr: map[string]string{"X-Goog-Upload-Protocol": "resumable"}, session: true},

		// 6: what the table does not have.
		{fix: 6, name: "method override", method: "POST", path: ob + "victim", hdr: map[string]string{"X-Http-Method-Override": "DELETE"}},
		{fix: 6, name: "lower-case method", method: "delete", path: ob + "victim"},
		{fix: 6, name: "bucket default ACL delete", method: "DELETE", path: "/storage/v1/b/" + gcsBucket + "/defaultObjectAcl/allUsers"},
		{fix: 6, name: "acl patch", method: "PATCH", path: ob + "victim/acl/allUsers", ct: js, body: acl},
		{fix: 6, name: "bucket notification delete", method: "DELETE", path: "/storage/v1/b/" + gcsBucket + "/notificationConfigs/1"},
	}
	return s
}

// TestGCSWriteSetOracle runs the corpus against fake-gcs-server's memory
// and filesystem backends: no shape changes anything token 5 does not own.
func TestGCSWriteSetOracle(t *testing.T) {
	corpus := gcsCorpus()
	if len(corpus) < 50 {
		t.Fatalf("the corpus has %d shapes; the oracle wants at least 50", len(corpus))
	}
	for _, backend := range []string{"memory", "filesystem"} {
		t.Run(backend, func(t *testing.T) {
			o := startGCSOracle(t, backend, "")
			state := o.snapshot(t)
			for _, s := range corpus {
				state = o.refused(t, s, state)
			}
		})
	}
}

// TestGCSWritesParsedOneWay checks each fix of issue 41 on both backends:
// the attacks of its item in the corpus are refused and change nothing
// token 5 does not own; the legitimate form of the same write, with a
// current token, works and leaves its stamp.
func TestGCSWritesParsedOneWay(t *testing.T) {
	const ob = "/storage/v1/b/" + gcsBucket + "/o/"
	legit := map[int]func(t *testing.T, o *gcsOracle){
		1: func(t *testing.T, o *gcsOracle) {
			// A resumable upload whose resource names its own object.
			o.legit(t, gcsShape{method: "POST", path: "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType=resumable&name=victim",
				ct: "application/json; charset=UTF-8", body: `{"bucket":"fenced","name":"victim","contentType":"text/plain"}`, session: true},
				"victim", "EVIL")
			// A multipart upload whose metadata names its own object.
			ct, body := gcsMultipart(`{"name":"dir/job","bucket":"fenced"}`, "multipart")
			o.legit(t, gcsShape{method: "POST", path: "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType=multipart&name=dir%2Fjob", ct: ct, body: body},
				"dir/job", "multipart")
		},
		2: func(t *testing.T, o *gcsOracle) {
			// The object literally named "t/acl/e", by its %2F name.
			o.legit(t, gcsShape{method: "PATCH", path: ob + "t%2Facl%2Fe", ct: "application/json", body: `{"metadata":{"x":"y"}}`},
				"t/acl/e", "")
			if o.dir == "" { // the filesystem backend has no ACL writes
				o.legit(t, gcsShape{method: "PUT", path: ob + "t%2Facl%2Fe/acl/allUsers", ct: "application/json", body: `{"entity":"allUsers","role":"READER"}`},
					"t/acl/e", "")
			}
		},
		3: func(t *testing.T, o *gcsOracle) {
			gen := o.generation(t, "victim")
			o.legit(t, gcsShape{method: "PATCH", path: ob + "victim?ifGenerationMatch=" + gen, ct: "application/json", body: `{"metadata":{"x":"y"}}`},
				"victim", "")
		},
		4: func(t *testing.T, o *gcsOracle) {
			ct, body := gcsMultipart(`{"name":"dir/job"}`, "slashes")
			o.legit(t, gcsShape{method: "POST", path: "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType=multipart&name=dir%2Fjob", ct: ct, body: body},
				"dir/job", "slashes")
			o.legit(t, gcsShape{method: "POST", path: ob + "own/copyTo/b/fenced/o/dir%2Fjob", ct: "application/json", body: `{"contentType":"text/plain"}`},
				"dir/job", "@own")
		},
		5: func(t *testing.T, o *gcsOracle) {
			ct, body := gcsMultipart(`{}`, "params")
			o.legit(t, gcsShape{method: "POST", path: "/upload/storage/v1/b/" + gcsBucket + "/o?alt=json&name=victim&prettyPrint=false&projection=full&uploadType=multipart", ct: ct, body: body},
				"victim", "params")
		},
		6: func(t *testing.T, o *gcsOracle) {
			// No write outside the table erased token 5's stamp (a POST on
			// an object is fake-gcs-server's update, without the stamp).
			if _, meta := o.stored(t, "own"); meta["fencing-token"] != fmt.Sprint(oracleLow) {
				t.Errorf("own's metadata %v; want its stamp %d kept", meta, oracleLow)
			}
			o.legit(t, gcsShape{method: "POST", path: ob + "victim/compose", ct: "application/json", body: `{"sourceObjects":[{"name":"own"}],"destination":{"contentType":"text/plain"}}`},
				"victim", "@own")
		},
	}
	for _, backend := range []string{"memory", "filesystem"} {
		t.Run(backend, func(t *testing.T) {
			o := startGCSOracle(t, backend, "")
			for fix := 1; fix <= 6; fix++ {
				t.Run(fmt.Sprint("item ", fix), func(t *testing.T) {
					state := o.snapshot(t)
					n := 0
					for _, s := range gcsCorpus() {
						if s.fix == fix {
							state = o.refused(t, s, state)
							n++
						}
					}
					if n == 0 {
						t.Fatal("no shape in the corpus")
					}
					legit[fix](t, o)
				})
			}
		})
	}
}

// legitToken is the current owner's token in the legitimate writes.
const legitToken = 101

// legit sends a write with the current token: it must be answered 2xx,
// leave content in bucket gcsBucket's object and stamp it legitToken.
// Content "" is the object's content before, "@src" that of object src.
func (o *gcsOracle) legit(t *testing.T, s gcsShape, object, content string) {
	t.Helper()
	switch {
	case content == "":
		content, _ = o.stored(t, object)
	case strings.HasPrefix(content, "@"):
		content, _ = o.stored(t, content[1:])
	}
	resp, body := o.send(t, s, legitToken)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s with the current token: %s %s", s.method, s.path, resp.Status, body)
	}
	got, meta := o.stored(t, object)
	if got != content || meta["fencing-token"] != fmt.Sprint(legitToken) {
		t.Fatalf("%s %s with the current token: stored %q, metadata %v; want %q stamped %d", s.method, s.path, got, meta, content, legitToken)
	}
}

// stored reads an object of gcsBucket from fake-gcs-server itself.
func (o *gcsOracle) stored(t testing.TB, object string) (string, map[string]string) {
	t.Helper()
	p := "/storage/v1/b/" + gcsBucket + "/o/" + url.PathEscape(object)
	resp, b := o.srv.Do(t, http.MethodGet, p, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", p, resp.Status, b)
	}
	var attrs struct{ Metadata map[string]string }
	json.Unmarshal(b, &attrs)
	_, content := o.srv.Do(t, http.MethodGet, p+"?alt=media", "")
	return string(content), attrs.Metadata
}

// generation is an object's generation in gcsBucket, read from the store.
func (o *gcsOracle) generation(t testing.TB, object string) string {
	t.Helper()
	_, b := o.srv.Do(t, http.MethodGet, "/storage/v1/b/"+gcsBucket+"/o/"+url.PathEscape(object), "")
	var attrs struct{ Generation string }
	json.Unmarshal(b, &attrs)
	return attrs.Generation
}

// Item 3 of issue 41 on a `precondition: generation` route: an empty
// ifGenerationMatch= is no condition for the store; the gateway took it for
// the worker's own and sent none of its own, so an upload with a current
// token overwrote a change made around the gateway. It is refused; the
// same upload with no condition is refused by the store on the gateway's
// (412), and with the worker's real condition it works and is stamped.
func TestGCSEmptyConditionRefused(t *testing.T) {
	o := startGCSOracle(t, "memory", "generation")
	if resp, b := o.srv.Do(t, http.MethodPost, "/upload/storage/v1/b/"+gcsBucket+"/o?uploadType=media&name=victim", "around"); resp.StatusCode != http.StatusOK {
		t.Fatalf("write around the gateway: %s %s", resp.Status, b)
	}
	gen := o.generation(t, "victim")
	ct, mp := gcsMultipart(`{"name":"victim"}`, "current")
	up := "/upload/storage/v1/b/" + gcsBucket + "/o?uploadType=multipart&name=victim"
	for _, q := range []string{"&ifGenerationMatch=", "&ifGenerationNotMatch=", "&ifMetagenerationMatch="} {
		resp, body := o.send(t, gcsShape{method: "POST", path: up + q, ct: ct, body: mp}, legitToken)
		if got, _ := o.stored(t, "victim"); got != "around" || o.generation(t, "victim") != gen {
			t.Fatalf("upload with %s: %s %.200s; the store now holds %q (generation %s, was %s): the change made around the gateway was overwritten",
				q, resp.Status, body, got, o.generation(t, "victim"), gen)
		}
		wantCode(t, "upload with "+q, resp.StatusCode, body, http.StatusBadRequest, "invalid_request")
	}
	resp, body := o.send(t, gcsShape{method: "POST", path: up, ct: ct, body: mp}, legitToken)
	if resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("upload with the gateway's condition: %s %s; want 412", resp.Status, body)
	}
	o.legit(t, gcsShape{method: "POST", path: up + "&ifGenerationMatch=" + gen, ct: ct, body: mp}, "victim", "current")
}
