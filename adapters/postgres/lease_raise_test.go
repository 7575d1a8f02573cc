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

// fenceRow reads the fence row of resource (highest 0 if none).
func fenceRow(t *testing.T, ls *Leases, resource string) (highest int64, ready bool, owner string, at time.Time) {
	t.Helper()
	err := ls.st.Pool.QueryRow(context.Background(),
		`SELECT highest, ready, owner, updated_at FROM fence WHERE resource = $1`, resource).Scan(&highest, &ready, &owner, &at)
	if err != nil && err.Error() != "no rows in result set" {
		t.Fatal(err)
	}
	return highest, ready, owner, at
}

// With RaiseFence the acquire statement raises the fence row to a fresh
// token in the same transaction: a new row starts ready, a takeover leaves
// it not ready (its first writer drains), a holder's retried acquire raises
// nothing, and a fence already above the token is never lowered.
func TestAcquireRaisesFence(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ls.RaiseFence = true
	ctx := context.Background()

	l, fresh, err := ls.Acquire(ctx, "/r", "A", 50*time.Millisecond)
	if err != nil || !fresh {
		t.Fatalf("acquire: %v fresh=%v", err, fresh)
	}
	if h, ready, owner, _ := fenceRow(t, ls, "/r"); h != l.Token || !ready || owner != "A" {
		t.Fatalf("fence after first acquire: %d ready=%v owner=%q; want %d ready owner A", h, ready, owner, l.Token)
	}
	time.Sleep(100 * time.Millisecond)
	l2, fresh, err := ls.Acquire(ctx, "/r", "B", time.Minute)
	if err != nil || !fresh || l2.Token <= l.Token {
		t.Fatalf("takeover: %v fresh=%v token %d after %d", err, fresh, l2.Token, l.Token)
	}
	h, ready, owner, at := fenceRow(t, ls, "/r")
	if h != l2.Token || ready || owner != "B" {
		t.Fatalf("fence after takeover: %d ready=%v owner=%q; want %d not ready owner B", h, ready, owner, l2.Token)
	}
	// The holder's retry keeps its token and leaves the row alone.
	if l3, fresh, err := ls.Acquire(ctx, "/r", "B", time.Minute); err != nil || fresh || l3.Token != l2.Token {
		t.Fatalf("retried acquire: %v fresh=%v token %d", err, fresh, l3.Token)
	}
	if _, _, _, at2 := fenceRow(t, ls, "/r"); !at2.Equal(at) {
		t.Fatalf("retried acquire touched the fence row (%v, was %v)", at2, at)
	}
	// Held by B: refused, nothing raised.
	if _, _, err := ls.Acquire(ctx, "/r", "C", time.Minute); !errors.Is(err, coordinator.ErrHeld) {
		t.Fatalf("acquire of a held lease: %v", err)
	}
	// A fence raised above the sequence by hand is never lowered by an
	// issuance below it.
	if _, err := ls.st.AdvanceFence(ctx, "/s", 1<<40, "op"); err != nil {
		t.Fatal(err)
	}
	if _, fresh, err := ls.Acquire(ctx, "/s", "A", time.Minute); err != nil || !fresh {
		t.Fatalf("acquire under a higher fence: %v", err)
	}
	if h, _, owner, _ := fenceRow(t, ls, "/s"); h != 1<<40 || owner != "op" {
		t.Fatalf("fence lowered to %d (%s)", h, owner)
	}
	// Without RaiseFence the statement is the plain one.
	ls.RaiseFence = false
	if _, _, err := ls.Acquire(ctx, "/plain", "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	if h, _, _, _ := fenceRow(t, ls, "/plain"); h != 0 {
		t.Fatalf("plain acquire raised the fence to %d", h)
	}
}

// A failed raise fails the issuance with it: no lease without its fence.
func TestAcquireRaiseAtomic(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ls.RaiseFence = true
	ctx := context.Background()
	_, err := ls.st.Pool.Exec(ctx, `
CREATE FUNCTION test_fail_raise() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'injected failure of the fence raise'; END; $$;
CREATE TRIGGER test_fail_raise BEFORE INSERT OR UPDATE ON fence
  FOR EACH ROW EXECUTE FUNCTION test_fail_raise();`)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ls.Acquire(ctx, "/r", "A", time.Minute); err == nil {
		t.Fatal("acquire succeeded though its fence raise failed")
	}
	if l, err := ls.Lease(ctx, "/r"); err != nil || l.Token != 0 {
		t.Fatalf("lease after the failed acquire: %+v %v; want none", l, err)
	}
	if _, err := ls.st.Pool.Exec(ctx, `DROP TRIGGER test_fail_raise ON fence`); err != nil {
		t.Fatal(err)
	}
	l, fresh, err := ls.Acquire(ctx, "/r", "A", time.Minute)
	if err != nil || !fresh {
		t.Fatal(err)
	}
	if h, _, _, _ := fenceRow(t, ls, "/r"); h != l.Token {
		t.Fatalf("fence %d after acquire of %d", h, l.Token)
	}
}

// Acquirers racing on few resources: every issued token is above the
// previous one of its resource and the fence ends at the last one (the
// guard trigger would have failed a statement that lowered it).
func TestAcquireRaiseConcurrent(t *testing.T) {
	pg := testenv.Postgres(t)
	ls := openTestLeases(t, pg.URL)
	ls.RaiseFence = true
	ctx := context.Background()
	const resources, workers, rounds = 3, 8, 25
	var (
		mu   sync.Mutex
		last = map[string]int64{}
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("w%d", w)
			for i := range rounds {
				res := fmt.Sprintf("/c%d", (w+i)%resources)
				l, _, err := ls.Acquire(ctx, res, owner, time.Minute)
				if errors.Is(err, coordinator.ErrHeld) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if l.Token <= last[res] {
					mu.Unlock()
					errs <- fmt.Errorf("%s: token %d after %d", res, l.Token, last[res])
					return
				}
				last[res] = l.Token
				mu.Unlock()
				if _, err := ls.Release(ctx, res, owner, l.Token); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for res, tok := range last {
		if h, _, _, _ := fenceRow(t, ls, res); h != tok {
			t.Errorf("%s: fence %d, last token issued %d", res, h, tok)
		}
	}
}
