package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// `fence reset` on store.etcd (two replicas, tokens from etcd's lock
// recipe): a fence raised by mistake is lowered only to the token of the
// resource's current lock holder, which the lock service vouches for; the
// holder's writes are then admitted through the other replica and reach
// the upstream, an earlier holder's and the mistaken number stay refused,
// and the next holder's token is above the reset value. A route whose
// tokens no lock service vouches for cannot be reset. Checked against the
// upstream's record and the fence record in etcd.
func TestEtcdSharedReset(t *testing.T) {
	c := testenv.Etcd(t, 1)
	up := newSharedUpstream(t)
	yaml := strings.Replace(etcdSharedYAML(c.Endpoints, up.url), "      hierarchical: false\n",
		fmt.Sprintf("      hierarchical: false\n      token_source:\n        etcd: {endpoints: [%s], prefix: %s, timeout: 1s}\n", quoteList(c.Endpoints), etcdLockPrefix), 1)
	yaml = strings.Replace(yaml, "store:\n", fmt.Sprintf(`    - name: plain
      match: {path_prefix: /plain/}
      upstream: {url: %q, timeout: 3s}
      resource: "{path}"
      hierarchical: false
store:
`, up.url), 1)
	r := sharedReplicas(t, 2, yaml)
	admin, gw0, gw1 := r[0].URL("admin"), r[0].URL("gateway"), r[1].URL("gateway")
	cli := etcdClient(t, c.Endpoints...)
	const key = "/orders/reset"

	old := mustEtcdLock(t, cli, key, 10)
	if st, body := write(t, "PUT", gw0+key, tok(old.token), "O1"); st != 200 {
		t.Fatalf("old holder's write: %d %s", st, body)
	}
	old.sess.Close()
	cur := mustEtcdLock(t, cli, key, 10)
	defer cur.sess.Close()
	if st, body := write(t, "PUT", gw0+key, tok(cur.token), "C1"); st != 200 {
		t.Fatalf("current holder's write: %d %s", st, body)
	}
	mistake := cur.token + 40_000
	if st, body := call(t, "POST", admin+"/v1/fences/advance", fmt.Sprintf(`{"resource":%q,"token":%d}`, key, mistake), jsonCT); st != 200 {
		t.Fatalf("advance: %d %s", st, body)
	}
	st, body := write(t, "PUT", gw1+key, tok(cur.token), "C2")
	wantCode(t, "the holder after the mistaken advance", st, body, 409, fencegate.CodeStaleToken)

	reset := func(res string, to int64) (int, string) {
		return call(t, "POST", admin+"/v1/fences/reset", fmt.Sprintf(`{"resource":%q,"to":%d,"confirm":%q}`, res, to, res), jsonCT)
	}
	for _, to := range []int64{old.token, cur.token - 1, cur.token + 1} {
		st, body := reset(key, to)
		wantCode(t, fmt.Sprintf("reset to %d (not the holder's token %d)", to, cur.token), st, body, 409, fencegate.CodeTokenOutOfRange)
	}
	if rec := etcdRecord(t, c.Endpoints, key); !strings.Contains(rec, fmt.Sprintf(`"h":%d,`, mistake)) {
		t.Fatalf("a refused reset changed the etcd record: %s", rec)
	}
	if st, body := reset(key, cur.token); st != 200 {
		t.Fatalf("reset to the holder's token %d: %d %s", cur.token, st, body)
	}
	if rec := etcdRecord(t, c.Endpoints, key); !strings.Contains(rec, fmt.Sprintf(`"h":%d,"r":false`, cur.token)) {
		t.Fatalf("etcd record after the reset: %s; want highest %d, not ready", rec, cur.token)
	}
	if st, body := write(t, "PUT", gw1+key, tok(cur.token), "C3"); st != 200 {
		t.Fatalf("the holder after the reset, through the other replica: %d %s", st, body)
	}
	st, body = write(t, "PUT", gw1+key, tok(old.token), "O2")
	wantCode(t, "the old holder after the reset", st, body, 409, fencegate.CodeStaleToken)
	st, body = write(t, "PUT", gw0+key, tok(mistake), "F1")
	wantCode(t, "the mistaken number after the reset", st, body, 409, fencegate.CodeUnknownToken)
	cur.sess.Close()
	next := mustEtcdLock(t, cli, key, 10)
	defer next.sess.Close()
	if next.token <= cur.token {
		t.Fatalf("next holder's token %d is not above the reset value %d", next.token, cur.token)
	}
	if st, body := write(t, "PUT", gw0+key, tok(next.token), "N1"); st != 200 {
		t.Fatalf("next holder's write: %d %s", st, body)
	}
	want := fmt.Sprintf("PUT O1@%d, PUT C1@%d, PUT C3@%d, PUT N1@%d", old.token, cur.token, cur.token, next.token)
	if got := recorder.Summary(up.rec.HistoryOf(key)); got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
	if rec := etcdRecord(t, c.Endpoints, key); !strings.Contains(rec, fmt.Sprintf(`"h":%d,"r":true`, next.token)) {
		t.Fatalf("etcd record at the end: %s; want highest %d ready", rec, next.token)
	}

	// A route without a token source: nothing vouches for a lower value.
	if st, body := write(t, "PUT", gw0+"/plain/x", "500", "P1"); st != 200 {
		t.Fatalf("plain write: %d %s", st, body)
	}
	st, body = reset("/plain/x", 5)
	wantCode(t, "reset on a route without token_source", st, body, 409, fencegate.CodeTokenOutOfRange)
	if !strings.Contains(body, "route plain") {
		t.Fatalf("refusal %s does not name the route", body)
	}
	if rec := etcdRecord(t, c.Endpoints, "/plain/x"); !strings.Contains(rec, `"h":500,`) {
		t.Fatalf("etcd record of /plain/x after the refused reset: %s; want 500", rec)
	}
}
