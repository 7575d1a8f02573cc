package gateway_test

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/server"
)

// namer is an upstream that names an object with one path segment, "/"
// sent as %2F (as the GCS JSON API and Azure Blob Storage do).
type namer struct{ *relay.Upstream }

func (namer) EncodedSlashNames() bool { return true }

// A route whose upstream is a gateway.ObjectNamer accepts %2F in a
// segment, as one name with one fence whatever the spelling of its
// slash; every other route still refuses it.
func TestObjectNamerAcceptsEncodedSlash(t *testing.T) {
	rec := &recorder.Recorder{}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	cfg, err := config.Parse("test.yaml", []byte("gateway:\n  routes:\n"+strings.ReplaceAll(`
    - name: objects
      match: {path_prefix: /objects/}
      upstream: {url: UPSTREAM}
      resource: "{path}"
`+ordersRoute, "UPSTREAM", up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	var routes []*gateway.Route
	for i, rc := range cfg.Gateway.Routes {
		h, err := relay.New(server.HTTPUpstreamOptions(rc))
		if err != nil {
			t.Fatal(err)
		}
		var u gateway.Upstream = h
		if i == 0 {
			u = namer{h}
		}
		rt, err := gateway.NewRoute(server.RouteOptions(rc), u)
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, rt)
	}
	g.SetRoutes(routes)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	if st, b := putSpelling(t, srv.URL, "/objects/dir%2Ffile", "42"); st != 200 {
		t.Fatalf("PUT /objects/dir%%2Ffile: %d %s", st, b)
	}
	for _, p := range []string{"/objects/dir%2ffile", "/objects//dir%2Ffile", "/objects/./dir%2Ffile"} {
		if st, b := putSpelling(t, srv.URL, p, "41"); st != 409 {
			t.Errorf("%s with token 41: %d %s; want 409 (one fence for the name dir/file)", p, st, b)
		}
	}
	if st, b := putSpelling(t, srv.URL, "/orders%2F7", "41"); st != 400 || !strings.Contains(b, "invalid_resource") {
		t.Errorf("/orders%%2F7: %d %s; want 400 invalid_resource", st, b)
	}
	if h := rec.History(); len(h) != 1 || h[0].Key != "/objects/dir/file" {
		t.Fatalf("upstream applied %s; want only the first write, to /objects/dir/file", recorder.Summary(h))
	}
}
