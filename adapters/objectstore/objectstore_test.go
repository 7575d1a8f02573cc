package objectstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// plain is a dialect of a toy store: PUT /NAME writes object NAME, whose
// version is its ETag.
type plain struct {
	store    *url.URL
	inspects atomic.Int64
	seen     func(*objectstore.Forward[string]) // each forward's state, in RoundTrip
}

func (d *plain) Inspect(r *http.Request, _ int64) (gateway.Inspection, *string, error) {
	d.inspects.Add(1)
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "" {
		return gateway.Inspection{}, nil, fencegate.InvalidRequest("no object")
	}
	return gateway.Inspection{Vars: map[string]string{"object": name}}, &name, nil
}
func (d *plain) Prepare(f *objectstore.Forward[string]) error { return nil }
func (d *plain) Tracks(f *objectstore.Forward[string]) (precondition.Kind, bool, bool) {
	return precondition.Replace, true, true
}
func (d *plain) Version(ctx context.Context, f *objectstore.Forward[string]) (string, error) {
	return "", nil
}
func (d *plain) Rewrite(pr *httputil.ProxyRequest, f *objectstore.Forward[string]) {
	pr.SetURL(d.store)
	f.Version.Apply(pr.Out.Header)
}
func (d *plain) RoundTrip(req *http.Request, f *objectstore.Forward[string]) (*http.Response, error) {
	if d.seen != nil {
		d.seen(f)
	}
	return http.DefaultTransport.RoundTrip(req)
}
func (d *plain) Answer(f *objectstore.Forward[string], resp *http.Response) (int, string, error) {
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}
func (d *plain) RefusalBody(h http.Header, e *fencegate.Error) []byte {
	h.Set("Content-Type", "text/plain")
	h.Set("X-Plain-Code", e.Code)
	return []byte(e.Code)
}

func newPlain(t *testing.T, store *httptest.Server) (*plain, *objectstore.Core[string], http.Handler, *bolt.Store) {
	t.Helper()
	su, _ := url.Parse(store.URL)
	d := &plain{store: su}
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := objectstore.New[string](d, objectstore.Options{Tracker: &precondition.Tracker{Store: st, Route: "r", Upstream: "plain"}})
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "r", Resource: "{object}", Vars: func(n string) bool { return n == "object" }}, c)
	if err != nil {
		t.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	return d, c, g, st
}

// recordingStore answers every request with etag and keeps the last
// request's headers.
func recordingStore(t *testing.T, etag string) (*struct{ h http.Header }, *httptest.Server) {
	got := &struct{ h http.Header }{}
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.h = r.Header.Clone()
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", etag)
	}))
	t.Cleanup(store.Close)
	return got, store
}

// The core forwards only what its dialect inspected, through the gateway:
// the dialect's state reaches the forward as an argument (inspected once),
// the write is made conditional and its answer's version recorded.
func TestCoreForwardsInspectedState(t *testing.T) {
	got, store := recordingStore(t, `"v1"`)
	d, _, g, st := newPlain(t, store)
	var state string
	d.seen = func(f *objectstore.Forward[string]) { state = *f.State }
	req := httptest.NewRequest(http.MethodPut, "http://gw/obj", strings.NewReader("x"))
	req.Header.Set("Fencing-Token", "3")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if n := d.inspects.Load(); n != 1 || state != "obj" {
		t.Errorf("inspected %d times, forward's state %q; want once, \"obj\"", n, state)
	}
	if got.h.Get("If-None-Match") != "*" || got.h.Get("Fencing-Token") != "" {
		t.Errorf("store saw If-None-Match %q, token %q; want the gateway's condition and no token", got.h.Get("If-None-Match"), got.h.Get("Fencing-Token"))
	}
	etag, err := st.LastETag(context.Background(), "obj")
	if err != nil || strings.Trim(etag, `"`) != "v1" {
		t.Errorf("recorded version %q (%v); want v1", etag, err)
	}
}

// A request that did not come through the gateway's inspection is refused,
// not classified anew: nothing reaches the store.
func TestCoreRefusesUninspectedForward(t *testing.T) {
	var hits atomic.Int64
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer store.Close()
	d, c, _, _ := newPlain(t, store)
	err := c.Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodPut, "http://gw/obj", strings.NewReader("x")),
		&gateway.Request{Token: 3, Resources: []string{"obj"}})
	var ref *fencegate.Error
	if !errors.As(err, &ref) || hits.Load() != 0 || d.inspects.Load() != 0 {
		t.Fatalf("Forward without inspection: %v, %d requests to the store, %d inspections; want a refusal and none", err, hits.Load(), d.inspects.Load())
	}
}

// Every refusal of an object-store route is written by one function: the
// status and Retry-After from the refusal, the body and its headers from
// the dialect.
func TestWriteRefusal(t *testing.T) {
	for _, method := range []string{http.MethodPut, http.MethodHead} {
		w := httptest.NewRecorder()
		e := &fencegate.Error{Code: fencegate.CodeFenceUnavailable, RetryAfter: 1500 * time.Millisecond}
		objectstore.WriteRefusal(w, httptest.NewRequest(method, "http://gw/obj", nil), e, (&plain{}).RefusalBody)
		h := w.Result().Header
		if w.Code != http.StatusServiceUnavailable || h.Get("Retry-After") != "2" || h.Get("Cache-Control") != "no-store" ||
			h.Get("Content-Type") != "text/plain" || h.Get("X-Plain-Code") != fencegate.CodeFenceUnavailable {
			t.Errorf("%s: status %d, headers %v", method, w.Code, h)
		}
		if want := map[string]string{http.MethodPut: fencegate.CodeFenceUnavailable, http.MethodHead: ""}[method]; w.Body.String() != want {
			t.Errorf("%s: body %q; want %q", method, w.Body, want)
		}
	}
}

// A stamp scan counts an object without a stamp and refuses a malformed
// one rather than guess (`fence rebuild` raises fences from it).
func TestStampScan(t *testing.T) {
	var got []objectstore.Stamp
	s := &objectstore.StampScan{Collection: "b", Key: "fencing-token", Fn: func(st objectstore.Stamp) error { got = append(got, st); return nil }}
	if err := s.Object("a", "7", true); err != nil {
		t.Fatal(err)
	}
	if err := s.Object("b", "", false); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "0", "-3", "x", "9223372036854775808"} {
		if err := s.Object("c", bad, true); err == nil {
			t.Errorf("stamp %q accepted", bad)
		}
	}
	if len(got) != 1 || got[0] != (objectstore.Stamp{Collection: "b", Object: "a", Token: 7}) || s.Unstamped != 1 {
		t.Errorf("stamps %v, %d unstamped; want b/a at 7 and 1", got, s.Unstamped)
	}
}

// A worker's own condition that pins a version is kept, for every
// dialect: the core forwards it as sent and adds none of its own, and the
// answer's version is still recorded.
func TestCoreKeepsWorkerPinnedVersion(t *testing.T) {
	got, store := recordingStore(t, `"v2"`)
	_, _, g, st := newPlain(t, store)
	req := httptest.NewRequest(http.MethodPut, "http://gw/obj", strings.NewReader("x"))
	req.Header.Set("Fencing-Token", "3")
	req.Header.Set("If-Match", `"w1"`)
	w := httptest.NewRecorder()
	g.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if got.h.Get("If-Match") != `"w1"` || got.h.Get("If-None-Match") != "" {
		t.Errorf("store saw If-Match %q, If-None-Match %q; want the worker's %q and none of the gateway's", got.h.Get("If-Match"), got.h.Get("If-None-Match"), `"w1"`)
	}
	etag, err := st.LastETag(context.Background(), "obj")
	if err != nil || strings.Trim(etag, `"`) != "v2" {
		t.Errorf("recorded version %q (%v); want v2", etag, err)
	}
}
