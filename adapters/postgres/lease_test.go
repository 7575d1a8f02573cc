package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/coordinator/coordinatortest"
	"github.com/fencegate/fencegate/internal/testenv"
)

func openTestLeases(t *testing.T, url string) *Leases {
	t.Helper()
	st, err := Open(context.Background(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return NewLeases(st)
}

func TestLeaseContract(t *testing.T) {
	urls := map[*Leases]string{}
	coordinatortest.Run(t, coordinatortest.Harness{
		New: func(t *testing.T) coordinator.Backend {
			pg := testenv.Postgres(t)
			ls := openTestLeases(t, pg.URL)
			urls[ls] = pg.URL
			return ls
		},
		Reopen: func(t *testing.T, b coordinator.Backend) coordinator.Backend {
			ls := b.(*Leases)
			ls.st.Close()
			n := openTestLeases(t, urls[ls])
			urls[n] = urls[ls]
			return n
		},
		// The failure is raised by a trigger after the row with the drawn
		// token was written, inside the acquire statement's transaction:
		// the production statement runs unchanged and aborts.
		FailAfterDraw: func(t *testing.T, b coordinator.Backend) func() int64 {
			ls := b.(*Leases)
			ctx := context.Background()
			_, err := ls.st.Pool.Exec(ctx, `
CREATE FUNCTION test_fail_after_draw() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'injected failure after drawing token %', NEW.highest_token; END; $$;
CREATE TRIGGER test_fail_after_draw AFTER INSERT OR UPDATE ON resource_fence
  FOR EACH ROW EXECUTE FUNCTION test_fail_after_draw();`)
			if err != nil {
				t.Fatal(err)
			}
			return func() int64 {
				if _, err := ls.st.Pool.Exec(ctx, `DROP TRIGGER test_fail_after_draw ON resource_fence`); err != nil {
					t.Fatal(err)
				}
				var last int64
				if err := ls.st.Pool.QueryRow(ctx, `SELECT last_value FROM resource_fence_token_seq`).Scan(&last); err != nil {
					t.Fatal(err)
				}
				return last
			}
		},
	})
}

// A release in one process wakes an acquirer waiting in another through
// LISTEN/NOTIFY: two services on two pools over one database.
func TestLeaseWaitWokenByOtherProcess(t *testing.T) {
	pg := testenv.Postgres(t)
	s1 := &coordinator.Service{Backend: openTestLeases(t, pg.URL)}
	s2 := &coordinator.Service{Backend: openTestLeases(t, pg.URL)}
	s2.Start()
	defer s2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	a, err := s1.Acquire(ctx, coordinator.AcquireRequest{Resource: "r", Owner: "A", TTL: coordinator.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		// The wait (20s) ends long before A's lease (1m) would: only the
		// notification of A's release can hand B the lease in time.
		_, err := s2.Acquire(ctx, coordinator.AcquireRequest{Resource: "r", Owner: "B",
			TTL: coordinator.Duration(time.Minute), Wait: coordinator.Duration(20 * time.Second)})
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let B start waiting (not needed for correctness)
	if ok, err := s1.Release(ctx, coordinator.RenewRequest{Resource: "r", Owner: "A", Token: a.Token}); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("B's waiting acquire = %v; want the lease after A's release in the other process", err)
	}
}

// The database cannot lower a token or remove a record, whatever SQL runs.
func TestLeaseGuardTrigger(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ctx := context.Background()
	if _, _, err := ls.Acquire(ctx, "r", "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE resource_fence SET highest_token = highest_token - 1`,
		`UPDATE resource_fence SET resource_id = 'other'`,
		`DELETE FROM resource_fence`,
		`TRUNCATE resource_fence`,
	} {
		if _, err := ls.st.Pool.Exec(ctx, sql); err == nil {
			t.Errorf("%s succeeded; want the guard to refuse it", sql)
		}
	}
}

// The database going away answers errors (the service turns them into 503)
// and the backend recovers by itself when it is back.
func TestLeaseStoreDownAndBack(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	st, err := Open(context.Background(), pg.URL, Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ls := NewLeases(st)
	ctx := context.Background()
	a, _, err := ls.Acquire(ctx, "r", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pg.Stop(t)
	_, _, err = ls.Acquire(ctx, "s", "A", time.Minute)
	if err == nil || errors.Is(err, coordinator.ErrHeld) {
		t.Fatalf("acquire with the database down = %v; want a store error", err)
	}
	pg.Start(t)
	var l coordinator.Lease
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, _, err = ls.Acquire(ctx, "s", "A", time.Minute)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("acquire after the database came back = %v", err)
	}
	if l.Token <= a.Token {
		t.Errorf("token after the outage %d; want above %d", l.Token, a.Token)
	}
}

// TestLeaseActive counts live leases by the database's clock: held ones
// count, released and expired ones do not.
func TestLeaseActive(t *testing.T) {
	ls := openTestLeases(t, testenv.Postgres(t).URL)
	ctx := context.Background()
	count := func() int {
		t.Helper()
		n, err := ls.Active(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("empty table: %d active", n)
	}
	a, _, err := ls.Acquire(ctx, "/a", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ls.Acquire(ctx, "/b", "B", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("two held: %d active", n)
	}
	if _, err := ls.Release(ctx, "/a", "A", a.Token); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // /b expires
	if n := count(); n != 0 {
		t.Fatalf("one released, one expired: %d active", n)
	}
}

// TestReleaseNotifies: a release made through one store wakes a watcher on
// another (the notification is its own transaction in the release's
// pipeline), and a refused release of a held lease notifies nobody.
func TestReleaseNotifies(t *testing.T) {
	pg := testenv.Postgres(t)
	a, b := openTestLeases(t, pg.URL), openTestLeases(t, pg.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	go b.WatchReleases(ctx, func(r string) { got <- r })
	if r := <-got; r != "" { // connected
		t.Fatalf("first report %q, want \"\"", r)
	}
	l1, _, err := a.Acquire(ctx, "/n/1", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l2, _, err := a.Acquire(ctx, "/n/2", "w1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Not the holder's token: nothing released, nothing notified.
	if ok, err := a.Release(ctx, "/n/1", "w1", l1.Token+100); err != nil || ok {
		t.Fatalf("release with a wrong token: %v %v", ok, err)
	}
	if ok, err := a.Release(ctx, "/n/2", "w1", l2.Token); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if r := <-got; r != "/n/2" {
		t.Fatalf("notified %q, want /n/2 (the refused release must not notify)", r)
	}
	if ok, err := a.Release(ctx, "/n/1", "w1", l1.Token); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if r := <-got; r != "/n/1" {
		t.Fatalf("notified %q, want /n/1", r)
	}
}
