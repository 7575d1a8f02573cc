package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/gateway"
)

// etagServer is an upstream that keeps each object's body and ETag and
// honours RFC 9110 If-Match and If-None-Match: * on writes.
type etagServer struct {
	mu     sync.Mutex
	bodies map[string]string
	etags  map[string]string
	n      int
	tokens []string // the token header of every request it received
}

func (s *etagServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = append(s.tokens, r.Header.Get("Fencing-Token"))
	p := r.URL.Path
	etag, exists := s.etags[p]
	switch {
	case r.Header.Get("If-None-Match") == "*" && exists,
		r.Header.Get("If-Match") != "" && r.Header.Get("If-Match") != etag:
		w.WriteHeader(http.StatusPreconditionFailed)
		return
	}
	switch r.Method {
	case http.MethodHead:
		if !exists {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", etag)
	case http.MethodPut:
		s.set(p, string(body))
		w.Header().Set("ETag", s.etags[p])
		w.WriteHeader(http.StatusCreated)
	}
}

// set writes an object, as the gateway's forward or someone around it.
func (s *etagServer) set(path, body string) {
	s.n++
	s.bodies[path], s.etags[path] = body, fmt.Sprintf(`"v%d"`, s.n)
}

func (s *etagServer) object(path string) (body, etag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[path], s.etags[path]
}

// TestForwardTakesTheRequestsFacts: an upstream forwards what the
// gateway hands it as Forward's argument, and nothing reaches it through
// the request's context. A request whose context carries no gateway value
// at all, spelled differently from the canonical path, is forwarded to
// the canonical path with the token header removed, made conditional on
// the ETag recorded for its fence key with its token (If-None-Match: *,
// then If-Match), its answer's ETag recorded, and a write the object
// changed around refused as precondition_failed with the object left as
// it was. The upstream's objects and the ETag store are read back.
func TestForwardTakesTheRequestsFacts(t *testing.T) {
	es := &etagServer{bodies: map[string]string{}, etags: map[string]string{}}
	srv := httptest.NewServer(es)
	defer srv.Close()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	up, err := relay.New(relay.Options{URL: srv.URL + "/base/", ETags: st, Route: "r",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	forward := func(token int64, body string) (int, error) {
		t.Helper()
		// A request as no gateway prepared it: the client's own spelling
		// of the path, a context of its own.
		// The gateway advanced the fence before the forward.
		if _, err := st.AdvanceFence(context.Background(), "objs/a", token, "w"); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequestWithContext(context.Background(), http.MethodPut, "http://gw/objs//./a", strings.NewReader(body))
		r.Header.Set("Fencing-Token", fmt.Sprint(token))
		w := httptest.NewRecorder()
		err := up.Forward(w, r, &gateway.Request{
			Path: "/objs/a", Resources: []string{"objs/a"}, Token: token, TokenHeader: "Fencing-Token",
		})
		return w.Code, err
	}

	for i, body := range []string{"one", "two"} {
		if code, err := forward(int64(5+i), body); err != nil || code != http.StatusCreated {
			t.Fatalf("write %q: %d %v; want 201", body, code, err)
		}
		got, etag := es.object("/base/objs/a")
		if got != body {
			t.Fatalf("upstream holds %q at the canonical path; want %q", got, body)
		}
		if rec, err := st.LastETag(context.Background(), "objs/a"); err != nil || strings.Trim(rec, `"`) != strings.Trim(etag, `"`) {
			t.Fatalf("recorded ETag %q (%v); want the upstream's %q", rec, err, etag)
		}
	}
	es.mu.Lock()
	es.set("/base/objs/a", "around")
	tokens := strings.Join(es.tokens, ",")
	es.mu.Unlock()
	if tokens != "," {
		t.Errorf("upstream saw the token headers %q; want none", tokens)
	}

	_, err = forward(7, "three")
	var ref *fencegate.Error
	if !errors.As(err, &ref) || ref.Code != fencegate.CodePreconditionFailed {
		t.Fatalf("write over a change made around the gateway: %v; want %s", err, fencegate.CodePreconditionFailed)
	}
	if got, _ := es.object("/base/objs/a"); got != "around" {
		t.Fatalf("upstream holds %q; want the change made around the gateway kept", got)
	}
}

// TestTokenHeaderLeftOut: the gateway names the header its token came in
// (its own, here not the default) and the forward leaves it out unless
// the route forwards it: a route built with no option about it strips it
// on writes and reads alike, one with ForwardToken sends it on. What the
// upstream received is read back from it.
func TestTokenHeaderLeftOut(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{} // path: the token headers received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("X-Lease-Token")+"|"+r.Header.Get("Fencing-Token"))
		mu.Unlock()
	}))
	defer srv.Close()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}),
		gateway.Options{TokenHeader: "x-lease-token", Logger: slog.New(slog.DiscardHandler)})
	var routes []*gateway.Route
	for _, forward := range []bool{false, true} {
		up, err := relay.New(relay.Options{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("/forward-%v/", forward)
		rt, err := gateway.NewRoute(gateway.RouteOptions{Name: prefix, PathPrefix: prefix, Resource: "{path}", ForwardToken: forward}, up)
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, rt)
	}
	g.SetRoutes(routes)
	gw := httptest.NewServer(g)
	defer gw.Close()
	for _, path := range []string{"/forward-false/a", "/forward-true/a"} {
		for _, method := range []string{http.MethodPut, http.MethodGet} {
			req, _ := http.NewRequest(method, gw.URL+path, strings.NewReader("x"))
			req.Header.Set("X-Lease-Token", "4")
			req.Header.Set("Fencing-Token", "other") // not the gateway's header: any client header
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{
		"/forward-false/a": {"|other", "|other"},
		"/forward-true/a":  {"4|other", "4|other"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("upstream received token headers %v; want %v", got, want)
	}
}

// TestTokenHeaderLeftOutOfUpgrades: a protocol upgrade, which goes
// through httputil.ReverseProxy rather than the lean forward, loses the
// header the gateway names too, and still switches. The upstream reports
// the token header it received on the switched connection.
func TestTokenHeaderLeftOutOfUpgrades(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.WriteString(c, "token="+r.Header.Get("Fencing-Token")+"\n")
	}))
	defer upstream.Close()
	up, err := relay.New(relay.Options{URL: upstream.URL})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := up.Forward(w, r, &gateway.Request{Path: "/ws", TokenHeader: "Fencing-Token"}); err != nil {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()

	_, br := switchTo(t, srv, "Fencing-Token: 9\r\n")
	if line, _ := br.ReadString('\n'); line != "token=\n" {
		t.Fatalf("upstream reports %q; want no token header", line)
	}
}

// TestTokenTrailerLeftOut: the token header sent as a request trailer is
// left out of the forward too, and so is every other trailer's value. An
// object-store dialect reads some bodies whole before the forward (S3
// DeleteObjects, a small GCS upload of unknown length), which fills the
// request's trailers, unannounced ones included: a copy of them would
// carry values the gateway never checked (before, X-Other went on). The
// upstream reports the trailers it received.
func TestTokenTrailerLeftOut(t *testing.T) {
	var mu sync.Mutex
	var got []string // the token header and trailer of every request received
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.Header.Get("Fencing-Token")+"|"+r.Trailer.Get("Fencing-Token")+"|"+r.Trailer.Get("X-Other"))
		mu.Unlock()
	}))
	defer upstream.Close()
	up, err := relay.New(relay.Options{URL: upstream.URL})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As a dialect's Inspect: the body read whole, and sent as read.
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		if err := up.Forward(w, r, &gateway.Request{Path: "/o", TokenHeader: "Fencing-Token"}); err != nil {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/o", io.MultiReader(strings.NewReader("body"))) // length unknown: chunked
	req.Header.Set("Fencing-Token", "7")
	req.Trailer = http.Header{"Fencing-Token": {"7"}, "X-Other": {"kept"}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"||"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("upstream received token header|trailer|other trailer %q; want %q", got, want)
	}
}
