package gateway_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate/gateway"
)

// seenUpstream records the Destination and fence keys of what it forwards.
type seenUpstream struct {
	dest string
	keys []string
}

func (u *seenUpstream) Forward(w http.ResponseWriter, r *http.Request, req *gateway.Request) error {
	u.dest, u.keys = r.Header.Get("Destination"), req.Resources
	w.WriteHeader(http.StatusCreated)
	return nil
}

// TestDestination: a MOVE is fenced on its Destination's key with its own
// token, forwarded with the Destination in the canonical form that was
// keyed, and refused when the Destination is another host's or another
// route's, or when its key holds a newer token.
func TestDestination(t *testing.T) {
	up := &seenUpstream{}
	dav, err := gateway.NewRoute(gateway.RouteOptions{Name: "dav", PathPrefix: "/dav/", Resource: "{path}"}, up)
	if err != nil {
		t.Fatal(err)
	}
	other, err := gateway.NewRoute(gateway.RouteOptions{Name: "other", PathPrefix: "/other/", Resource: "{path}"}, up)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{}),
		gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	g.SetRoutes([]*gateway.Route{dav, other})
	move := func(token, dest string) (int, string) {
		r := httptest.NewRequest("MOVE", "http://gw.example/dav/a", nil)
		r.Header.Set("Fencing-Token", token)
		r.Header.Set("Destination", dest)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(w.Body.Bytes(), &e)
		return w.Code, e.Error
	}
	put := func(path, token string) {
		r := httptest.NewRequest("PUT", "http://gw.example"+path, nil)
		r.Header.Set("Fencing-Token", token)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", path, w.Code, w.Body)
		}
	}

	if st, code := move("5", "http://gw.example/dav/x/./y//b"); st != http.StatusCreated {
		t.Fatalf("MOVE: %d %s", st, code)
	}
	if up.dest != "http://gw.example/dav/x/y/b" || len(up.keys) != 2 || up.keys[0] != "/dav/a" || up.keys[1] != "/dav/x/y/b" {
		t.Fatalf("forwarded Destination %q, keys %q; want the canonical path and both keys", up.dest, up.keys)
	}
	put("/dav/b", "7")
	for _, tc := range []struct {
		dest, code string
		status     int
	}{
		{"http://gw.example/dav/b", "stale_fencing_token", http.StatusConflict},
		{"/dav/b", "stale_fencing_token", http.StatusConflict},
		{"http://elsewhere.example/dav/c", "foreign_destination", http.StatusBadRequest},
		{"http://gw.example/other/c", "foreign_destination", http.StatusBadRequest},
		{"http://gw.example/nowhere", "foreign_destination", http.StatusBadRequest},
		{"http://gw.example/dav/%2e%2e/other/c", "invalid_resource", http.StatusBadRequest},
		{"ftp://gw.example/dav/c", "invalid_request", http.StatusBadRequest},
	} {
		up.dest = ""
		if st, code := move("5", tc.dest); st != tc.status || code != tc.code {
			t.Errorf("MOVE to %s: %d %s; want %d %s", tc.dest, st, code, tc.status, tc.code)
		}
		if up.dest != "" {
			t.Errorf("MOVE to %s was forwarded", tc.dest)
		}
	}
}

// TestPreserveHost: upstream.preserve_host sends the client's Host
// upstream (with the Destination naming it, as the client sent it);
// without it the upstream gets its own host.
func TestPreserveHost(t *testing.T) {
	for _, keep := range []bool{false, true} {
		var host, dest string
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, dest = r.Host, r.Header.Get("Destination")
			w.WriteHeader(http.StatusCreated)
		})
		route := "    - name: dav\n      match: {path_prefix: /dav/}\n      upstream: {url: UPSTREAM"
		if keep {
			route += ", preserve_host: true"
		}
		g := newTestGatewayFor(t, route+"}\n      resource: \"{path}\"\n", h)
		req, _ := http.NewRequest("MOVE", g.URL+"/dav/a", nil)
		req.Host = "files.example"
		req.Header.Set("Fencing-Token", "1")
		req.Header.Set("Destination", "http://files.example/dav/b")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("preserve_host %v: MOVE %d", keep, resp.StatusCode)
		}
		if (host == "files.example") != keep || dest != "http://files.example/dav/b" {
			t.Fatalf("preserve_host %v: upstream saw Host %q, Destination %q", keep, host, dest)
		}
	}
}
