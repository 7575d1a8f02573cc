package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestRecoverSparesTokenSourceRoutes (issue 43): a store recovery
// (`fencegate fence recover`, and store.postgres.on_regression: recover on
// a store flagged gone back) makes the coordinator's tokens issued before
// it worthless, and leaves the routes whose tokens come from etcd alone:
// their numbers (etcd revisions) never reach the floor of the
// coordinator's sequence. In fence mode shared over PostgreSQL, with a real
// etcd: after the recovery the etcd lock's current holder writes and its
// writes land upstream, a later holder takes over, and the earlier holder
// is refused by the fence as before; a coordinator route's old tokens are
// refused; /readyz is ready, and is not while a fence of the etcd route
// stands where a recovery raised it.
func TestRecoverSparesTokenSourceRoutes(t *testing.T) {
	for _, auto := range []bool{false, true} {
		name := "fence recover"
		if auto {
			name = "on_regression recover"
		}
		t.Run(name, func(t *testing.T) { recoverSparesTokenSource(t, auto) })
	}
}

func recoverSparesTokenSource(t *testing.T, auto bool) {
	cluster := testenv.Etcd(t, 1)
	pg := testenv.Postgres(t)
	rec, up := newUpstream(t)
	onRegression := ""
	if auto {
		onRegression = ", on_regression: recover"
	}
	yaml := strings.Replace(etcdGateway(up, cluster.Endpoints), "  embedded: {path: $DIR/fencegate.db}\n",
		fmt.Sprintf("  postgres: {url: %q, timeout: 2s%s}\nfence: {mode: shared}\n", pg.URL, onRegression), 1)
	p := startFencegate(t, yaml)
	gw, coord := p.URL("gateway"), p.URL("coordinator")
	cli := etcdClient(t, cluster.Endpoints...)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	conn, err := pgx.Connect(ctx2, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx2)

	a := mustEtcdLock(t, cli, "/orders/r1", 30)
	if st, body := write(t, "PUT", gw+"/orders/r1", tok(a.token), "a1"); st != 200 {
		t.Fatalf("etcd holder's write before the recovery: %d %s", st, body)
	}
	r := acquire(t, coord, "/reports/r1", "reporter")
	if st, body := write(t, "PUT", gw+"/reports/r1", tok(r), "r1"); st != 200 {
		t.Fatalf("coordinator lease's write before the recovery: %d %s", st, body)
	}
	probe := acquire(t, coord, "/reports/probe", "reporter") // issued, never written
	seen := acquire(t, coord, "/reports/seen", "reporter")   // shows when the replica has the floor
	c := mustEtcdLock(t, cli, "/orders/stuck", 30)
	defer c.sess.Close()
	if st, body := write(t, "PUT", gw+"/orders/stuck", tok(c.token), "c1"); st != 200 {
		t.Fatalf("etcd holder's write before the recovery: %d %s", st, body)
	}

	var floor int64
	if auto {
		// The store flagged gone back, as a replica that found it would:
		// the replica's guard recovers it by itself.
		if _, err := conn.Exec(ctx2, `INSERT INTO fencegate_meta (key, value) VALUES ('regressed', 'e2e: flagged by hand')`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			return conn.QueryRow(ctx2, `SELECT token_floor FROM fencegate_recovery ORDER BY id DESC LIMIT 1`).Scan(&floor) == nil
		})
	} else {
		out := startCLI(t, nil, "fence", "recover", "-c", p.CfgPath, "--force", "--by", "e2e")
		if code := out.Wait(); code != 0 {
			t.Fatalf("fence recover exited %d:\n%s", code, out.Out.Tail(20))
		}
		var res struct {
			Recovered  bool  `json:"recovered"`
			TokenFloor int64 `json:"token_floor"`
		}
		s := strings.TrimSpace(out.Out.String())
		if err := json.Unmarshal([]byte(s[strings.LastIndex(s, "\n")+1:]), &res); err != nil || !res.Recovered {
			t.Fatalf("fence recover: %v %+v\n%s", err, res, s)
		}
		floor = res.TokenFloor
	}
	if floor < 1<<40 {
		t.Fatalf("token floor %d after the recovery; want above 2^40", floor)
	}
	// The replica's store guard reads the floor every second: it has it
	// once a token of before is refused on a resource kept for that (the
	// writes before may land there, or meet the store still flagged).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, body := write(t, "PUT", gw+"/reports/seen", tok(seen), "seen")
		if st == 409 {
			wantCode(t, "a coordinator token of before the recovery", st, body, 409, "stale_fencing_token")
			break
		}
		if (st != 200 && st != 503) || time.Now().After(deadline) {
			t.Fatalf("a coordinator token of before the recovery: %d %s; want 409 within 30s (200 or 503 until the replica reads the floor)", st, body)
		}
	}

	// The coordinator's tokens of before are worthless, also on a resource
	// never written (the floor, not a fence row, refuses it).
	for _, w := range []struct {
		path  string
		token int64
	}{{"/reports/probe", probe}, {"/reports/r1", r}} {
		st, body := write(t, "PUT", gw+w.path, tok(w.token), "late")
		wantCode(t, "coordinator token of before the recovery on "+w.path, st, body, 409, "stale_fencing_token")
	}
	// The etcd lock's holder is not refused: its write lands.
	if st, body := write(t, "PUT", gw+"/orders/r1", tok(a.token), "a2"); st != 200 {
		t.Fatalf("etcd holder's write after the recovery: %d %s; want it applied", st, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	a.sess.Close()
	b := mustEtcdLock(t, cli, "/orders/r1", 30)
	defer b.sess.Close()
	if st, body := write(t, "PUT", gw+"/orders/r1", tok(b.token), "b1"); st != 200 {
		t.Fatalf("next etcd holder's write after the recovery: %d %s; want it applied", st, body)
	}
	st, body := write(t, "PUT", gw+"/orders/r1", tok(a.token), "a3")
	wantCode(t, "the earlier etcd holder after the next one wrote", st, body, 409, "stale_fencing_token")

	if got, want := applied(rec, "/orders/r1"), fmt.Sprintf("PUT a1@%d, PUT a2@%d, PUT b1@%d", a.token, a.token, b.token); got != want {
		t.Fatalf("upstream history of /orders/r1: %s; want %s", got, want)
	}
	for key, want := range map[string]string{"/reports/r1": fmt.Sprintf("PUT r1@%d", r), "/reports/probe": ""} {
		if got := applied(rec, key); got != want {
			t.Fatalf("upstream history of %s: %q; want %q", key, got, want)
		}
	}
	if st := getStatus(t, p.URL("admin")+"/readyz"); st != 200 {
		t.Fatalf("/readyz %d after the recovery", st)
	}

	// A fence a recovery raised to the floor (as one did before such
	// routes were left alone) refuses every holder of the resource: no
	// replica says it is ready while one does.
	if _, err := conn.Exec(ctx2, `UPDATE fence SET highest = $1, owner = 'fencegate fence recover' WHERE resource = '/orders/stuck'`, floor); err != nil {
		t.Fatal(err)
	}
	st, body = write(t, "PUT", gw+"/orders/stuck", tok(c.token), "c2")
	wantCode(t, "the holder of a fence raised to the floor", st, body, 409, "stale_fencing_token")
	p2 := startFencegate(t, yaml)
	if st, body := call(t, "GET", p2.URL("admin")+"/readyz", ""); st != 503 || !strings.Contains(body, "etcd (route orders)") {
		t.Fatalf("/readyz with an etcd route's fence at the floor: %d %s; want 503 naming the route", st, body)
	}
}
