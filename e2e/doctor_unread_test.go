package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// `fencegate doctor` finds an upstream that answers writes without reading
// their bodies: a note for one that honours Connection: close (the gateway
// closes every connection that carried a body, so its answers stay with
// their requests), a failure for one that acts on the body as a request
// even then, and ok for one that reads bodies.
func TestDoctorFindsUnreadBodies(t *testing.T) {
	_, reads := newUpstream(t) // internal/recorder: a Go server that reads every body
	for _, tc := range []struct {
		name, upstream string
		wantExit       int
		want           string
	}{
		{"reads bodies", reads, 0, "ok: " + reads + " reads a write's body (or closes the connection) before its next request (path /probe/); upstream.keep_alive_writes: true would keep"},
		{"reads bodies with keep_alive_writes", reads + " keep", 0, "ok: " + reads + " reads a write's body (or closes the connection) before its next request (path /probe/)\n"},
		{"answers unread with keep_alive_writes", startEarlyUpstream(t) + " keep", 1, "FAIL: %s answers a write without reading its body and takes the body for its next request on a kept connection, and upstream.keep_alive_writes keeps that connection"},
		{"answers unread and honours close", startEarlyUpstream(t), 0, "answers a write without reading its body and takes the body for its next request on a kept connection"},
		{"answers unread and ignores close", testenv.PythonServer(t, "testdata/early_answer_upstream.py", "/_applied", "ignore-close"), 1,
			"FAIL: %s answers a write without reading its body and then acts on the body as a request of its own, even with Connection: close"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, keep := strings.CutSuffix(tc.upstream, " keep")
			yaml := checkPathYAML(upstream)
			if keep {
				yaml = strings.Replace(yaml, "check_path: /probe/}", "check_path: /probe/, keep_alive_writes: true}", 1)
			}
			code, out := runDoctor(t, yaml)
			want := tc.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, upstream)
			}
			if code != tc.wantExit || !strings.Contains(out, want) {
				t.Fatalf("doctor exit %d; want %d and %q:\n%s", code, tc.wantExit, want, out)
			}
		})
	}
}

// checkPathYAML is the orders route with upstream.check_path set.
func checkPathYAML(upstream string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 10s, check_path: /probe/}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
`, upstream)
}
