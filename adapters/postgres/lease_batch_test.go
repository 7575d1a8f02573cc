package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/internal/testenv"
)

func mustAcquire(t *testing.T, ls *Leases, resource, owner string) coordinator.Lease {
	t.Helper()
	l, _, err := ls.Acquire(context.Background(), resource, owner, time.Minute)
	if err != nil {
		t.Fatalf("acquire %s: %v", resource, err)
	}
	return l
}

func newOp(resource, owner string, token int64, ttl time.Duration) *leaseOp {
	return &leaseOp{ctx: context.Background(), resource: resource, owner: owner, token: token, ttl: ttl}
}

// TestRenewBatchMixed: one batch statement carrying valid renewals and
// renewals of a foreign, stale, released and unknown lease answers each
// operation as the single statement would: the valid ones renewed with
// their token unchanged, the others lease_lost, their records untouched.
func TestRenewBatchMixed(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ctx := context.Background()
	a := mustAcquire(t, ls, "/m/a", "w1")
	foreign := mustAcquire(t, ls, "/m/foreign", "w2")
	stale := mustAcquire(t, ls, "/m/stale", "w1")
	rel := mustAcquire(t, ls, "/m/released", "w1")
	if ok, err := ls.Release(ctx, rel.Resource, "w1", rel.Token); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	b := mustAcquire(t, ls, "/m/b", "w1")
	before, err := ls.Lease(ctx, foreign.Resource)
	if err != nil {
		t.Fatal(err)
	}
	ops := []*leaseOp{
		newOp(a.Resource, "w1", a.Token, 5*time.Minute),
		newOp(foreign.Resource, "w1", foreign.Token, 5*time.Minute),  // not the owner
		newOp(stale.Resource, "w1", stale.Token+1000, 5*time.Minute), // not the token
		newOp(rel.Resource, "w1", rel.Token, 5*time.Minute),          // released: never revived
		newOp("/m/unknown", "w1", 1, 5*time.Minute),
		newOp(b.Resource, "w1", b.Token, 2*time.Minute),
	}
	ls.execRenews(ops)
	for i, want := range []bool{true, false, false, false, false, true} {
		op := ops[i]
		switch {
		case want && op.err != nil:
			t.Errorf("%s: %v, want renewed", op.resource, op.err)
		case !want && !errors.Is(op.err, coordinator.ErrLost):
			t.Errorf("%s: %v, want ErrLost", op.resource, op.err)
		case want:
			if op.lease.Token != op.token || op.lease.Owner != "w1" || op.lease.Resource != op.resource {
				t.Errorf("%s: answered %+v", op.resource, op.lease)
			}
			if op.lease.Remaining < op.ttl-10*time.Second || op.lease.Remaining > op.ttl {
				t.Errorf("%s: remaining %v, want about %v", op.resource, op.lease.Remaining, op.ttl)
			}
		}
	}
	after, err := ls.Lease(ctx, foreign.Resource)
	if err != nil {
		t.Fatal(err)
	}
	if after.Owner != "w2" || after.Token != foreign.Token || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Errorf("foreign lease changed by a refused batch renewal: %+v -> %+v", before, after)
	}
	if r, _ := ls.Lease(ctx, rel.Resource); r.Held() {
		t.Errorf("released lease revived by a batch renewal: %+v", r)
	}
	if s, _ := ls.Lease(ctx, stale.Resource); s.Token != stale.Token {
		t.Errorf("token of %s changed: %d -> %d", stale.Resource, stale.Token, s.Token)
	}
}

// TestReleaseBatchMixed: a batch of releases answers each operation on its
// own, changes only the leases it ended, and notifies only those that are
// free afterwards (a refused release wakes nobody).
func TestReleaseBatchMixed(t *testing.T) {
	pg := testenv.Postgres(t)
	ls, watcher := openTestLeases(t, pg.URL), openTestLeases(t, pg.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	go watcher.WatchReleases(ctx, func(r string) { got <- r })
	if r := <-got; r != "" {
		t.Fatalf("first report %q", r)
	}
	a := mustAcquire(t, ls, "/r/a", "w1")
	foreign := mustAcquire(t, ls, "/r/foreign", "w2")
	stale := mustAcquire(t, ls, "/r/stale", "w1")
	b := mustAcquire(t, ls, "/r/b", "w1")
	ls.init()
	ops := []*leaseOp{
		newOp(a.Resource, "w1", a.Token, 0),
		newOp(foreign.Resource, "w1", foreign.Token, 0),
		newOp(stale.Resource, "w1", stale.Token+1000, 0),
		newOp("/r/unknown", "w1", 1, 0),
		newOp(b.Resource, "w1", b.Token, 0),
	}
	ls.execReleases(ops)
	for i, want := range []bool{true, false, false, false, true} {
		if ops[i].err != nil || ops[i].released != want {
			t.Errorf("%s: released %v, %v; want %v", ops[i].resource, ops[i].released, ops[i].err, want)
		}
	}
	for _, l := range []coordinator.Lease{foreign, stale} {
		cur, err := ls.Lease(ctx, l.Resource)
		if err != nil || !cur.Held() || cur.Token != l.Token || cur.Owner != l.Owner {
			t.Errorf("%s changed by a refused batch release: %+v %v", l.Resource, cur, err)
		}
	}
	// The batch's notifications, then one by a single release as a marker:
	// nothing else may come before it.
	mark := mustAcquire(t, ls, "/r/mark", "w1")
	if ok, err := ls.Release(ctx, mark.Resource, "w1", mark.Token); err != nil || !ok {
		t.Fatal(ok, err)
	}
	seen := map[string]bool{}
	for r := range got {
		if r == mark.Resource {
			break
		}
		seen[r] = true
	}
	if len(seen) != 2 || !seen[a.Resource] || !seen[b.Resource] {
		t.Errorf("notified %v, want exactly %s and %s", seen, a.Resource, b.Resource)
	}
}

// TestLeaseBatchStatementFails: a batch whose statement fails (here an
// error raised for one row) changed nothing and is retried one by one, so
// only the operation that fails alone gets an error.
func TestLeaseBatchStatementFails(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ctx := context.Background()
	x := mustAcquire(t, ls, "/f/x", "w1")
	poison := mustAcquire(t, ls, "/f/poison", "w1")
	y := mustAcquire(t, ls, "/f/y", "w1")
	_, err := ls.st.Pool.Exec(ctx, `
CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.resource_id = '/f/poison' THEN RAISE EXCEPTION 'injected failure for %', NEW.resource_id; END IF; RETURN NEW; END; $$;
CREATE TRIGGER test_poison BEFORE UPDATE ON resource_fence FOR EACH ROW EXECUTE FUNCTION test_poison();`)
	if err != nil {
		t.Fatal(err)
	}
	ls.init()
	renews := []*leaseOp{
		newOp(x.Resource, "w1", x.Token, time.Minute),
		newOp(poison.Resource, "w1", poison.Token, time.Minute),
		newOp(y.Resource, "w1", y.Token, time.Minute),
	}
	ls.execRenews(renews)
	if renews[0].err != nil || renews[2].err != nil {
		t.Errorf("renewals beside the failing one: %v, %v; want nil", renews[0].err, renews[2].err)
	}
	if err := renews[1].err; err == nil || errors.Is(err, coordinator.ErrLost) {
		t.Errorf("failing renewal: %v; want the database's error", err)
	}
	releases := []*leaseOp{
		newOp(x.Resource, "w1", x.Token, 0),
		newOp(poison.Resource, "w1", poison.Token, 0),
		newOp(y.Resource, "w1", y.Token, 0),
	}
	ls.execReleases(releases)
	if !releases[0].released || releases[0].err != nil || !releases[2].released || releases[2].err != nil {
		t.Errorf("releases beside the failing one: %v %v, %v %v; want released", releases[0].released, releases[0].err, releases[2].released, releases[2].err)
	}
	if releases[1].err == nil || releases[1].released {
		t.Errorf("failing release: %v %v; want the database's error", releases[1].released, releases[1].err)
	}
	if l, _ := ls.Lease(ctx, poison.Resource); !l.Held() {
		t.Errorf("the failing release ended the lease: %+v", l)
	}
}

// TestLeaseBatchConcurrent: many callers renewing and releasing at once
// through Renew and Release (so in batches, with several operations on
// one lease queued together): every renewal of a live lease succeeds,
// exactly one release of each lease reports true, and once it has
// returned no renewal of that lease succeeds.
func TestLeaseBatchConcurrent(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ctx := context.Background()
	const leases, perLease = 8, 4
	for round := 0; ; round++ {
		var held []coordinator.Lease
		for i := range leases {
			held = append(held, mustAcquire(t, ls, fmt.Sprintf("/c/%d/%d", round, i), "w1"))
		}
		var wg sync.WaitGroup
		errs := make(chan error, leases*perLease*2)
		for _, l := range held {
			for range perLease {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						if _, err := ls.Renew(ctx, l.Resource, "w1", l.Token, time.Minute); err != nil {
							errs <- fmt.Errorf("renew of live %s: %w", l.Resource, err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		for _, l := range held {
			var releasedN sync.Mutex
			n := 0
			for range perLease {
				wg.Add(2)
				go func() { // release, then renew: must be lost
					defer wg.Done()
					ok, err := ls.Release(ctx, l.Resource, "w1", l.Token)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						releasedN.Lock()
						n++
						releasedN.Unlock()
					}
					if _, err := ls.Renew(ctx, l.Resource, "w1", l.Token, time.Minute); !errors.Is(err, coordinator.ErrLost) {
						errs <- fmt.Errorf("renew of %s after its release returned: %v, want ErrLost", l.Resource, err)
					}
				}()
				go func() { // a racing renewal: either outcome, no error
					defer wg.Done()
					if _, err := ls.Renew(ctx, l.Resource, "w1", l.Token, time.Minute); err != nil && !errors.Is(err, coordinator.ErrLost) {
						errs <- err
					}
				}()
			}
			defer func() {
				if n != 1 {
					t.Errorf("%s: %d releases reported true, want 1", l.Resource, n)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, l := range held {
			if cur, err := ls.Lease(ctx, l.Resource); err != nil || cur.Held() || cur.Token != l.Token {
				t.Errorf("%s after release: %+v %v", l.Resource, cur, err)
			}
		}
		// Keep going until batches were formed (they nearly always are in
		// the first round; the test is about their answers).
		if ls.renews.batches.Load() > 0 && ls.releases.batches.Load() > 0 || t.Failed() || round == 50 {
			t.Logf("rounds %d, renewal batches %d (%d ops), release batches %d (%d ops)", round+1,
				ls.renews.batches.Load(), ls.renews.batched.Load(), ls.releases.batches.Load(), ls.releases.batched.Load())
			if ls.renews.batches.Load() == 0 || ls.releases.batches.Load() == 0 {
				t.Error("no batch was formed")
			}
			return
		}
	}
}

// TestLeaseBatchCallerCancelled: a caller whose context ends while its
// renewal is queued behind batches in flight returns at once with its
// context's error; the others are answered as usual.
func TestLeaseBatchCallerCancelled(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ctx := context.Background()
	var held []coordinator.Lease
	for i := range batchRunners + 2 {
		held = append(held, mustAcquire(t, ls, fmt.Sprintf("/x/%d", i), "w1"))
	}
	// Hold the rows of the first batchRunners leases, so that every runner
	// is blocked in the database with one of them.
	blocker, err := ls.st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	for _, l := range held[:batchRunners] {
		if _, err := blocker.Exec(ctx, `SELECT 1 FROM resource_fence WHERE resource_id = $1 FOR UPDATE`, l.Resource); err != nil {
			t.Fatal(err)
		}
	}
	results := make(chan error, len(held))
	for _, l := range held[:batchRunners] {
		go func() {
			_, err := ls.Renew(ctx, l.Resource, "w1", l.Token, time.Minute)
			results <- err
		}()
	}
	waitFor(t, func() bool {
		var n int
		ls.st.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE resource_fence%'`).Scan(&n)
		return n == batchRunners
	})
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() {
		_, err := ls.Renew(cctx, held[batchRunners].Resource, "w1", held[batchRunners].Token, time.Minute)
		cancelled <- err
	}()
	waitFor(t, func() bool { ls.renews.mu.Lock(); defer ls.renews.mu.Unlock(); return len(ls.renews.queue) == 1 })
	last := held[batchRunners+1]
	go func() {
		_, err := ls.Renew(ctx, last.Resource, "w1", last.Token, time.Minute)
		results <- err
	}()
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range batchRunners + 1 {
		if err := <-results; err != nil {
			t.Errorf("renewal queued beside a cancelled one: %v", err)
		}
	}
	// The cancelled renewal's lease is still its holder's, whether or not
	// the renewal ran.
	if _, err := ls.Renew(ctx, held[batchRunners].Resource, "w1", held[batchRunners].Token, time.Minute); err != nil {
		t.Errorf("renewal after a cancelled one: %v", err)
	}
}
