package gcs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/oauth2"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/gateway"
)

// The worker's credentials and token never reach the store; the gateway's
// own credentials do, and only the gateway's.
func TestCredentialIsolation(t *testing.T) {
	var got http.Header
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"generation":"5"}`))
	}))
	defer store.Close()
	for _, tc := range []struct {
		name string
		ts   oauth2.TokenSource
		want string
	}{
		{"service account", oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "gateway-token", TokenType: "Bearer"}), "Bearer gateway-token"},
		{"no auth", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := New(Options{Spec: objectstore.Spec{Route: "r", Endpoint: store.URL, Resource: "{bucket}/{object}"}, TokenSource: tc.ts})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodDelete, "http://gw/storage/v1/b/bk/o/a%2Fb", nil)
			req.Header.Set("Authorization", "Bearer worker-key")
			req.Header.Set("Fencing-Token", "7")
			w := httptest.NewRecorder()
			throughGateway(t, u).ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if a := got.Get("Authorization"); a != tc.want {
				t.Fatalf("store saw Authorization %q; want %q", a, tc.want)
			}
			if v := got.Get("Fencing-Token"); v != "" {
				t.Fatalf("store saw the token header %q", v)
			}
		})
	}
}

// The multipart upload's metadata part gets the stamp, set over any value
// the worker sent; the media part and the rest of the body are unchanged
// and the length changes by exactly the metadata's growth.
func TestStampMultipart(t *testing.T) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{"Content-Type": {"application/json; charset=UTF-8"}}
	p, _ := mw.CreatePart(h)
	p.Write([]byte(`{"name":"x","metadata":{"fencing-token":"999","keep":"1"}}`))
	h = textproto.MIMEHeader{"Content-Type": {"text/plain"}}
	p, _ = mw.CreatePart(h)
	media := strings.Repeat("media bytes\r\n--not-a-boundary\r\n", 5000)
	p.Write([]byte(media))
	mw.Close()
	in := body.Bytes()
	stamp := func(doc []byte) ([]byte, error) { return stampJSON(doc, "", "fencing-token", "42") }
	out, delta, _, err := editMultipart(bufio.NewReaderSize(bytes.NewReader(in), 64<<10), mw.Boundary(), stamp)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out)
	if int64(len(b)) != int64(len(in))+delta {
		t.Fatalf("length %d; want %d%+d", len(b), len(in), delta)
	}
	_, params, _ := mime.ParseMediaType(mw.FormDataContentType())
	r := multipart.NewReader(bytes.NewReader(b), params["boundary"])
	meta, err := r.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Name     string            `json:"name"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(meta).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Name != "x" || doc.Metadata["fencing-token"] != "42" || doc.Metadata["keep"] != "1" {
		t.Fatalf("metadata part %+v; want name x, fencing-token 42, keep 1", doc)
	}
	mp, err := r.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := io.ReadAll(mp); string(m) != media {
		t.Fatalf("media part changed (%d bytes; want %d)", len(m), len(media))
	}
}

// A session URL binds its object and token: another object, token, upload
// id or bucket fails verification.
func TestSessionBinding(t *testing.T) {
	u, err := New(Options{Spec: objectstore.Spec{Resource: "{bucket}/{object}"}})
	if err != nil {
		t.Fatal(err)
	}
	f := &forward{State: &state{target: target{bucket: "bk", object: "dir/obj"}}, Token: 41}
	in := httptest.NewRequest(http.MethodPost, "http://gw.example:8080/upload/storage/v1/b/bk/o", nil)
	loc, ok := u.sessionURL(in, f, "http://127.0.0.1:4443/upload/storage/v1/b/bk/o?uploadType=resumable&name=dir%2Fobj&upload_id=U1")
	if !ok || !strings.HasPrefix(loc, "http://gw.example:8080/upload/storage/v1/b/bk/o?") {
		t.Fatalf("session URL %q", loc)
	}
	l, _ := url.Parse(loc)
	parseSession := func(q url.Values) (*session, *fencegate.Error) {
		// As a session's request is read: its query parsed first.
		rq, ref := parseQuery(q.Encode(), true)
		if ref != nil {
			return nil, ref
		}
		return parseSession(rq)
	}
	s, ref := parseSession(l.Query())
	if ref != nil || !u.verify(s, "bk") || s.token != 41 || s.object != "dir/obj" {
		t.Fatalf("the gateway's own session URL does not verify: %+v %v", s, ref)
	}
	for name, edit := range map[string]func(q url.Values){
		"object":    func(q url.Values) { q.Set("name", "other") },
		"upload id": func(q url.Values) { q.Set("upload_id", "U2") },
		"token":     func(q url.Values) { q.Set(sessionParam, strings.Replace(q.Get(sessionParam), "41.", "42.", 1)) },
	} {
		q := l.Query()
		edit(q)
		s, ref := parseSession(q)
		if ref == nil && u.verify(s, "bk") {
			t.Errorf("%s changed: still verifies", name)
		}
	}
	if s, _ := parseSession(l.Query()); u.verify(s, "other-bucket") {
		t.Error("bucket changed: still verifies")
	}
}

// readAhead sends a small body of unknown length with its length and its
// bytes unchanged; a longer one streams on whole, and a read error of the
// worker's body reaches the forwarded request.
func TestReadAhead(t *testing.T) {
	for _, n := range []int{0, 1, 4 << 10, smallUpload, smallUpload + 1, 3 * smallUpload} {
		in := bytes.Repeat([]byte("abcdefg"), n/7+1)[:n]
		body, length := readAhead(bytes.NewReader(in), 100)
		wantLen := int64(n)
		if n > smallUpload {
			wantLen = -1
		}
		if length != wantLen {
			t.Errorf("%d bytes: length %d; want %d", n, length, wantLen)
		}
		got, err := io.ReadAll(body)
		if err != nil || !bytes.Equal(got, in) {
			t.Errorf("%d bytes: read %d bytes (err %v); want the body unchanged", n, len(got), err)
		}
	}
	gone := errors.New("worker gone")
	body, length := readAhead(io.MultiReader(strings.NewReader("part"), iotest.ErrReader(gone)), 4)
	if got, err := io.ReadAll(body); length != -1 || string(got) != "part" || !errors.Is(err, gone) {
		t.Fatalf("failing body: length %d, read %q, err %v; want -1, \"part\", %v", length, got, err, gone)
	}
}

// stampJSON gives the same document, read back, on its plain path (no
// metadata member) as on the decoding one, and the plain path declines
// what it cannot splice safely.
func TestStampJSON(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { } `, `{"name":"a/b","contentType":"text/plain"}`,
		`{"name":"x","metadata":{"fencing-token":"999","keep":"1"}}`,
		`{"name":"x","metadata":null}`,
		`{"name":"x","\u006detadata":{"fencing-token":"999"}}`,
		`{"name":"metadata"}`, ``,
	} {
		out, err := stampJSON([]byte(doc), "", "fencing-token", "42")
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: stamped %s: %v", doc, out, err)
		}
		var want map[string]any
		if strings.TrimSpace(doc) != "" {
			json.Unmarshal([]byte(doc), &want)
		} else {
			want = map[string]any{}
		}
		meta, _ := want["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["fencing-token"] = "42"
		want["metadata"] = meta
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: stamped %s; want %v", doc, out, want)
		}
	}
	for _, doc := range []string{`[]`, `{"a":1`, `{"a":"\u0000"}`, `{"metadata":{}}`, `{"a":{"metadata":1}}`} {
		if out, ok := stampPlain([]byte(doc), "fencing-token", "42"); ok {
			t.Errorf("stampPlain(%s) = %s; want declined", doc, out)
		}
	}
}

// throughGateway is a gateway with one route, "{bucket}/{object}", to u:
// the upstream forwards only what the gateway inspected and admitted.
func throughGateway(t testing.TB, u *Upstream) http.Handler {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "r", Resource: "{bucket}/{object}",
		Vars: func(n string) bool { return n == "bucket" || n == "object" }}, u)
	if err != nil {
		t.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	return g
}

// A request that did not come through the gateway's inspection is refused,
// not inspected anew: nothing reaches the store (issue 41: no fallback
// inspection for a caller that does not exist).
func TestForwardNeedsInspection(t *testing.T) {
	hits := 0
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer store.Close()
	u, err := New(Options{Spec: objectstore.Spec{Route: "r", Endpoint: store.URL, Resource: "{bucket}/{object}"}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodDelete, "http://gw/storage/v1/b/bk/o/x", nil)
	req.Header.Set("Fencing-Token", "7")
	if err := u.Forward(httptest.NewRecorder(), req, &gateway.Request{Token: 7, Resources: []string{"bk/x"}}); err == nil || hits != 0 {
		t.Fatalf("Forward without inspection: %v, %d requests to the store; want a refusal and none", err, hits)
	}
}

// appendJSONString writes what json.Marshal writes for any string: the
// plain ones (a stamp's usual key and token) quoted in place, the others
// (a custom stamp key with characters JSON or its HTML escaping changes)
// through json.Marshal.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "fencing-token", "42", "9223372036854775807", "a b~", `a"b`, `a\b`, "<k>", "a&b",
		"\x00", "\x1f", "\x7f", "é", "\u2028", "\xff", "tab\there"} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendJSONString([]byte("x"), s)
		if !ok || string(got) != "x"+string(want) {
			t.Errorf("appendJSONString(%q) = %s, %v; want x%s", s, got, ok, want)
		}
	}
	// A custom key that needs escaping still stamps a document that reads
	// back with that key.
	out, ok := stampPlain([]byte(`{"name":"o"}`), `k"<&>`+"\u2028", "7")
	var doc struct{ Metadata map[string]string }
	if !ok || json.Unmarshal(out, &doc) != nil || doc.Metadata[`k"<&>`+"\u2028"] != "7" {
		t.Errorf("stampPlain with an escaped key = %s, %v", out, ok)
	}
}
