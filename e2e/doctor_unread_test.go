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
	conditional := func(modes ...string) string {
		return testenv.PythonServer(t, "testdata/conditional_upstream.py", "/_applied", modes...)
	}
	cond, auth := conditional(), conditional("auth")
	notFound, redirect := conditional("notfound"), conditional("redirect")
	const shortcuts = "answered unread: a write with If-None-Match: * on an existing object (a conditional 304 or 412): 304; a write with an If-Match that does not match (a conditional 412): 412"
	for _, tc := range []struct {
		name, upstream string
		wantExit       int
		want           string
	}{
		{"reads bodies", reads, 0, "ok: " + reads + " reads a write's body (or closes the connection) before its next request (path /probe/; 6 shapes of write probed); upstream.keep_alive_writes: true would keep"},
		{"reads bodies with keep_alive_writes", reads + " keep", 0, "ok: " + reads + " reads a write's body (or closes the connection) before its next request (path /probe/; 6 shapes of write probed)\n"},
		{"answers unread with keep_alive_writes", startEarlyUpstream(t) + " keep", 1, "FAIL: %s answers a write without reading its body and takes the body for its next request on a kept connection, and upstream.keep_alive_writes keeps that connection"},
		{"answers unread and honours close", startEarlyUpstream(t), 0, "answers a write without reading its body and takes the body for its next request on a kept connection"},
		{"answers unread and ignores close", testenv.PythonServer(t, "testdata/early_answer_upstream.py", "/_applied", "ignore-close"), 1,
			"FAIL: %s answers a write without reading its body and then acts on the body as a request of its own, even with Connection: close"},
		// The conditional shortcut: a plain write is read, a refused
		// precondition is not. Found; keep_alive_writes closes those writes.
		{"conditional shortcut", cond, 0, "note: %s answers a write without reading its body and takes the body for its next request on a kept connection; it honours Connection: close, which the gateway sends with every request that has a body, so through the gateway answers stay with their requests, but clients that reach it directly can be desynchronized (path /probe/; " + shortcuts + "); upstream.keep_alive_writes: true would keep the connections of the other writes (those with a precondition or an Expect still close)\n"},
		{"conditional shortcut with keep_alive_writes", cond + " keep", 0, "note: %s answers writes with a precondition or an Expect without reading their bodies and takes the body for its next request on a kept connection; upstream.keep_alive_writes sends those writes with Connection: close, which it honours, and keeps the others' connections (path /probe/; " + shortcuts + ")\n"},
		// Refusals keep_alive_writes cannot foresee: a FAIL with it, a
		// note (and no recommendation) without.
		{"401 without credentials with keep_alive_writes", auth + " keep auth", 1, "keeps that connection: a worker's body can carry requests the fence never sees, and their answers reach other workers; remove keep_alive_writes (path /probe/; answered unread: a write without the route's headers (a 401 or 403 where they carry the credentials): 401)\n"},
		{"401 without credentials", auth + " auth", 0, "(a 401 or 403 where they carry the credentials): 401)\n"},
		{"404 with keep_alive_writes", notFound + " keep", 1, "remove keep_alive_writes (path /probe/; answered unread: a write under a parent that does not exist (a 404 or 409): 404)\n"},
		{"redirect with keep_alive_writes", redirect + " keep", 1, "remove keep_alive_writes (path /probe/; answered unread: a write to a path with // (a redirect where the upstream cleans paths): 301)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, withAuth := strings.CutSuffix(tc.upstream, " auth")
			upstream, keep := strings.CutSuffix(upstream, " keep")
			yaml := checkPathYAML(upstream)
			opts := ""
			if keep {
				opts += ", keep_alive_writes: true"
			}
			if withAuth {
				opts += `, headers: {Authorization: "Bearer probe"}`
			}
			yaml = strings.Replace(yaml, "check_path: /probe/}", "check_path: /probe/"+opts+"}", 1)
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
