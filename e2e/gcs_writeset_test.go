package e2e

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/fencegate/fencegate/adapters/gcs"
)

// The write-set oracle of GCS routes, white-box: each shape is sent
// straight to fake-gcs-server, the store's state before and after tells
// which objects it changed, and the gateway's classification of the same
// request (gcs.Writes) must name every one of them or refuse the request.
func TestGCSWriteSetWhiteBox(t *testing.T) {
	for _, backend := range []string{"memory", "filesystem"} {
		t.Run(backend, func(t *testing.T) {
			o := startGCSStore(t, backend)
			o.seed(t, o.srv.Endpoint)
			state := o.snapshot(t)
			wrote := 0 // shapes that changed the store: the oracle has something to check
			for _, s := range gcsCorpus() {
				if s.onSession {
					continue // a session's binding is the gateway's own
				}
				o.sendAt(t, o.srv.Endpoint, s, oracleLow)
				after := o.snapshot(t)
				changed := len(changedKeys(state, after)) > 0
				if miss := o.uncovered(t, s, state, after); len(miss) > 0 {
					t.Errorf("%s: %s %s changed %v on the store, which the gateway's classification does not fence",
						s.name, s.method, s.path, miss)
				}
				if changed {
					// A fresh store for the next shape.
					wrote++
					o.reset(t)
					after = o.snapshot(t)
				}
				state = after
			}
			if wrote < 30 || o.accepted < 10 {
				t.Fatalf("%d shapes changed the store sent straight to it, %d of them accepted by the gateway's classification: the oracle lost its subject", wrote, o.accepted)
			}
			t.Logf("%d shapes changed the store, each covered (%d) or refused by the gateway's classification", wrote, o.accepted)
		})
	}
}

// uncovered returns the objects (bucket/name, or "bucket B") a shape
// changed between two snapshots that gcs.Writes does not name; nothing if
// it refuses the request.
func (o *gcsOracle) uncovered(t testing.TB, s gcsShape, before, after snapshot) []string {
	t.Helper()
	req, err := s.request("http://gateway.test")
	if err != nil {
		t.Fatal(err)
	}
	// As the gateway's server reads it off the wire.
	if req.URL, err = url.ParseRequestURI(s.path); err != nil {
		return nil // no server takes it
	}
	ws, err := gcs.Writes(req, []byte(s.body))
	if err != nil {
		return nil // refused
	}
	o.accepted++
	fenced := map[string]bool{}
	for _, w := range ws {
		if w.Name == "" {
			fenced["bucket "+w.Bucket] = true
		}
		fenced[w.Bucket+"/"+w.Name] = true
		fenced["in "+w.Bucket] = true
	}
	var miss []string
	for k := range changedKeys(before, after) {
		obj := o.objectOf(k)
		b, _, _ := strings.Cut(obj, "/")
		if _, existed := before[obj]; !existed && strings.HasPrefix(obj, "bucket ") && fenced["in "+strings.TrimPrefix(obj, "bucket ")] {
			// fake-gcs-server creates the missing bucket of an object it
			// composes: it held no object of anyone's.
			continue
		}
		if !fenced[obj] && !fenced["bucket "+b] && !slices.Contains(miss, obj) {
			miss = append(miss, obj)
		}
	}
	slices.Sort(miss)
	return miss
}

// reset empties the store and writes the buckets and seeds again,
// straight to it.
func (o *gcsOracle) reset(t testing.TB) {
	t.Helper()
	if resp, b := o.srv.Do(t, http.MethodPost, "/_internal/delete_all", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("reset: %s %s", resp.Status, b)
	}
	for _, b := range gcsBuckets {
		if resp, body := o.srv.Do(t, http.MethodGet, "/storage/v1/b/"+b, ""); resp.StatusCode == http.StatusNotFound {
			o.srv.CreateBucket(t, b)
		} else if resp.StatusCode != http.StatusOK {
			t.Fatalf("reset: bucket %s: %s %s", b, resp.Status, body)
		}
	}
	o.seed(t, o.srv.Endpoint)
}

// changedKeys are the keys that differ between two snapshots.
func changedKeys(before, after snapshot) map[string]bool {
	ch := map[string]bool{}
	for k, v := range before {
		if after[k] != v {
			ch[k] = true
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			ch[k] = true
		}
	}
	return ch
}

// objectOf names the object (bucket/name) or bucket ("bucket B") of a
// snapshot key.
func (o *gcsOracle) objectOf(k string) string {
	kind, what, _ := strings.Cut(k, " ")
	switch kind {
	case "bucket":
		return k
	case "file":
		rel, err := filepath.Rel(filepath.Base(o.srv.Root), what)
		if err != nil || strings.HasPrefix(rel, "..") {
			return "outside the store's directory: " + what
		}
		rel = filepath.ToSlash(rel)
		if !strings.Contains(rel, "/") {
			// Beside the buckets' directories: a bucket's own file.
			return "bucket " + strings.TrimSuffix(rel, ".bucketMetadata")
		}
		return strings.TrimSuffix(rel, ".metadata")
	}
	return what
}

// FuzzGCSWriteSet mutates request shapes (method, path bytes, query names
// and their case, headers, JSON bodies) and checks the write-set oracle on
// each, through the gateway with token 5 against a store where every
// victim is fenced at 100: a request the gateway refuses changes nothing;
// one it forwards changes only what gcs.Writes names (or token 5's own
// objects). FUZZ_GCS_BACKEND picks fake-gcs-server's backend (memory).
//
//	CI=true go test -run '^$' -fuzz FuzzGCSWriteSet -fuzztime 10m -parallel 1 ./e2e/
func FuzzGCSWriteSet(f *testing.F) {
	for _, s := range gcsCorpus() {
		if s.onSession {
			continue
		}
		var hdr strings.Builder
		for k, v := range s.hdr {
			hdr.WriteString(k + ": " + v + "\n")
		}
		f.Add(s.method, s.path, s.ct, hdr.String(), s.body)
	}
	backend := os.Getenv("FUZZ_GCS_BACKEND")
	if backend == "" {
		backend = "memory"
	}
	o := startGCSOracle(f, backend, "")
	f.Fuzz(func(t *testing.T, method, path, ct, hdr, body string) {
		s := gcsShape{name: "fuzz", method: method, path: path, ct: ct, body: body, session: true, hdr: map[string]string{}}
		if !fuzzSendable(s, hdr) {
			t.Skip()
		}
		for _, l := range strings.Split(hdr, "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok {
				s.hdr[http.CanonicalHeaderKey(k)] = v
			}
		}
		for _, k := range []string{"Authorization", "Fencing-Token", "Content-Length", "Transfer-Encoding", "Host", "Connection", "Expect"} {
			delete(s.hdr, k)
		}
		before := o.snapshot(t)
		resp, answer := o.send(t, s, oracleLow)
		after := o.snapshot(t)
		refused := strings.Contains(answer, gcs.DetailsType)
		if refused {
			if ch := o.changes(before, after); len(ch) > 0 {
				t.Fatalf("%q %q refused by the gateway (%s), yet the store changed:\n  %s", method, path, resp.Status, strings.Join(ch, "\n  "))
			}
			return
		}
		miss := o.uncovered(t, s, before, after)
		var notOwn []string
		for _, m := range miss {
			if !o.owned("object " + m) {
				notOwn = append(notOwn, m)
			}
		}
		if len(notOwn) > 0 {
			t.Fatalf("%q %q forwarded (%s %.200s) changed %v, which the gateway's classification does not fence", method, path, resp.Status, answer, notOwn)
		}
	})
}

// headerNameBytes are the bytes of a header field name (RFC 9110 token).
const headerNameBytes = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// fuzzSendable reports whether a fuzzed shape can go on the wire at all
// (a method token, a path without spaces or control bytes, header values
// without line breaks).
func fuzzSendable(s gcsShape, hdr string) bool {
	if s.method == "" || len(s.path) == 0 || s.path[0] != '/' || len(s.body) > 1<<16 {
		return false
	}
	for _, r := range s.method {
		if r > unicode.MaxASCII || !(unicode.IsLetter(r) || r == '-') {
			return false
		}
	}
	for _, c := range []byte(s.path) {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	for _, l := range append(strings.Split(hdr, "\n"), s.ct) {
		for _, c := range []byte(l) {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		if k, _, ok := strings.Cut(l, ": "); ok && (k == "" || strings.Trim(k, headerNameBytes) != "") {
			return false
		}
	}
	req, err := s.request("http://gateway.test")
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err == nil
}
