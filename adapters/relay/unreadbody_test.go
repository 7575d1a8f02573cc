package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// ProbeUnreadBodies sends every shape to an upstream that reads bodies:
// each is found read, with the upstream's status; a shape the upstream
// refuses by closing the connection (here a // path) is no failure of the
// probe, since no body is left on a connection that is gone; and the shape
// without the route's headers runs only when the route has some.
func TestProbeUnreadBodiesShapes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case strings.Contains(r.RequestURI, "//"):
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		case r.Header.Get("Authorization") == "":
			w.WriteHeader(http.StatusUnauthorized)
		case r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "":
			w.WriteHeader(http.StatusPreconditionFailed)
		}
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, headers := range []map[string]string{nil, {"Authorization": "Bearer x"}} {
		probes, err := ProbeUnreadBodies(ctx, srv.URL, "/probe/", headers, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := len(UnreadShapes)
		if headers == nil {
			want--
		}
		if len(probes) != want {
			t.Fatalf("headers %v: %d probes, want %d", headers, len(probes), want)
		}
		for _, p := range probes {
			if p.Finding != BodyRead {
				t.Errorf("%s: finding %d, want read", p.Shape.Name, p.Finding)
			}
			wantStatus := 200
			switch {
			case strings.Contains(p.Shape.Name, "//"):
				wantStatus = 0
			case headers == nil || p.Shape.noAuth:
				wantStatus = 401
			case p.Shape.headers != nil:
				wantStatus = 412
			}
			if p.Status != wantStatus {
				t.Errorf("headers %v, %s: status %d, want %d", headers, p.Shape.Name, p.Status, wantStatus)
			}
		}
	}
}
