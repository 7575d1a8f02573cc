package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/internal/recorder"
)

// upstream.keep_alive_writes keeps the gateway's connection to an upstream
// that reads every body: writes through it reuse one connection, where
// without it each write has a connection of its own; either way every
// write lands once, in order, with its token (the upstream's history).
func TestKeepAliveWrites(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_alive_writes=%v", keep), func(t *testing.T) {
			rec := &recorder.Recorder{}
			var conns atomic.Int64
			srv := httptest.NewUnstartedServer(rec)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			up := fmt.Sprintf("{url: %q, timeout: 10s, keep_alive_writes: %v}", srv.URL, keep)
			gw := startFencegate(t, `
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: `+up+`
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
`)
			const writes = 20
			before := conns.Load()
			for i := 1; i <= writes; i++ {
				if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/k", fmt.Sprint(i), fmt.Sprintf("v%d", i)); st != 200 {
					t.Fatalf("write %d: %d %s", i, st, body)
				}
			}
			// Token 3 after 20 is refused and changes nothing.
			if st, body := write(t, "PUT", gw.URL("gateway")+"/orders/k", "3", "stale"); st != 409 {
				t.Fatalf("stale write: %d %s", st, body)
			}
			opened := conns.Load() - before
			want := make([]string, writes)
			for i := range want {
				want[i] = fmt.Sprintf("PUT v%d@%d", i+1, i+1)
			}
			if got := applied(rec, "/orders/k"); got != strings.Join(want, ", ") {
				t.Fatalf("upstream history %q, want %q", got, strings.Join(want, ", "))
			}
			if keep && opened > 2 {
				t.Errorf("keep_alive_writes: %d writes opened %d upstream connections; want them kept (at most 2)", writes, opened)
			}
			if !keep && opened < writes {
				t.Errorf("without keep_alive_writes %d writes opened only %d upstream connections: a connection that carried a body was used again", writes, opened)
			}
		})
	}
}
