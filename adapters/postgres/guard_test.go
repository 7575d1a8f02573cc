package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
)

// rewind makes the store go back as a restored backup or a promoted
// asynchronous standby does: the token sequence below what was issued.
func rewind(t *testing.T, st *Store, to int64) {
	t.Helper()
	if _, err := st.Pool.Exec(context.Background(), `SELECT setval('resource_fence_token_seq', $1)`, to); err != nil {
		t.Fatal(err)
	}
}

// A coordinator that draws a token not above one it issued before (the
// store went back) refuses to hand it out, records the finding so every
// process refuses, and every replica then refuses writes and issuance and
// fails its readiness, until Recover; after it, tokens issued before are
// refused (also on a resource with no fence row), new ones are far above,
// and a second Recover does nothing.
func TestGuardRefusesStoreThatWentBack(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := context.Background()
	st := openFenceStore(t, pg.URL, Options{})
	other := openFenceStore(t, pg.URL, Options{}) // another replica
	ls := NewLeases(st)
	ls.RaiseFence = true
	f := newShared(t, other, SharedFenceOptions{})

	var last int64
	for i := range 5 {
		l, _, err := ls.Acquire(ctx, "/g", "w"+string(rune('a'+i)), time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token
		time.Sleep(2 * time.Millisecond)
	}
	p := mustAdmit(t, f, "/g", last)
	p.Release()

	rewind(t, st, last-3)
	time.Sleep(2 * time.Millisecond)
	_, _, err := ls.Acquire(ctx, "/g2", "late", time.Minute)
	if code(err) != fencegate.CodeStoreRegressed {
		t.Fatalf("acquire of a token issued before: %v; want %s", err, fencegate.CodeStoreRegressed)
	}
	// The other replica learns it from the store.
	deadline := time.Now().Add(5 * time.Second)
	for other.Guard().Regressed() == "" {
		if err := other.CheckStore(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the other replica did not find the regression recorded in the store")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := f.Admit(ctx, gateway.Write{Resource: "/g", Token: last}); code(err) != fencegate.CodeStoreRegressed {
		t.Fatalf("write on the regressed store: %v", err)
	}
	if err := other.Ping(ctx); err == nil {
		t.Fatal("Ping (readyz) passed on a regressed store")
	}

	res, err := st.Recover(ctx, RecoverOptions{By: "test"})
	if err != nil || !res.Recovered || res.TokenFloor < last+DefaultRecoveryGap || res.LeasesEnded == 0 {
		t.Fatalf("recover: %+v %v", res, err)
	}
	for _, s := range []*Store{st, other} {
		if err := s.CheckStore(ctx); err != nil {
			t.Fatal(err)
		}
		if c := s.Guard().Regressed(); c != "" {
			t.Fatalf("still refused after the recovery: %s", c)
		}
	}
	// Every token issued before is refused, on a resource with or without
	// a fence row.
	for _, r := range []string{"/g", "/never-written"} {
		if _, err := f.Admit(ctx, gateway.Write{Resource: r, Token: last}); code(err) != fencegate.CodeStaleToken {
			t.Fatalf("old token %d on %s after the recovery: %v; want stale", last, r, err)
		}
	}
	l, fresh, err := ls.Acquire(ctx, "/g", "new", time.Minute)
	if err != nil || !fresh || l.Token <= res.TokenFloor {
		t.Fatalf("acquire after the recovery: %+v fresh=%v %v; want a token above %d", l, fresh, err, res.TokenFloor)
	}
	p = mustAdmit(t, f, "/g", l.Token)
	p.Release()

	again, err := st.Recover(ctx, RecoverOptions{})
	if err != nil || again.Recovered {
		t.Fatalf("second recover: %+v %v; want nothing done", again, err)
	}
	recs, err := st.Recoveries(ctx)
	if err != nil || len(recs) != 1 || recs[0].TokenFloor != res.TokenFloor {
		t.Fatalf("audit records: %+v %v; want the one recovery", recs, err)
	}
}

// A promotion (a timeline other than the one the store was served on) is
// refused after a primary recorded without a synchronous standby and taken
// as it is after one with.
func TestGuardPromotion(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		replication string
		refused     bool
	}{{"0 async", true}, {"", true}, {"0 sync", false}} {
		t.Run(c.replication, func(t *testing.T) {
			pg := testenv.Postgres(t)
			st := openFenceStore(t, pg.URL, Options{})
			// The store was served on "timeline 0" by a primary that ran as
			// c.replication says; this server is on another one.
			if _, err := st.Pool.Exec(ctx, `UPDATE fencegate_meta SET value = '0' WHERE key = 'timeline'`); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Pool.Exec(ctx, `DELETE FROM fencegate_meta WHERE key = 'replication'`); err != nil {
				t.Fatal(err)
			}
			if c.replication != "" {
				if _, err := st.Pool.Exec(ctx, metaSetSQL, "replication", c.replication); err != nil {
					t.Fatal(err)
				}
			}
			// A process that never saw timeline 0 itself (a restart).
			st2 := openFenceStore(t, pg.URL, Options{})
			got := st2.Guard().Regressed() != ""
			if got != c.refused {
				t.Fatalf("refused = %v (%q); want %v", got, st2.Guard().Regressed(), c.refused)
			}
			if got {
				if _, _, err := NewLeases(st2).Acquire(ctx, "/p", "w", time.Minute); code(err) != fencegate.CodeStoreRegressed {
					t.Fatalf("acquire on a promoted asynchronous store: %v", err)
				}
				return
			}
			var tl string
			if err := st2.Pool.QueryRow(ctx, `SELECT value FROM fencegate_meta WHERE key = 'timeline'`).Scan(&tl); err != nil || tl == "0" {
				t.Fatalf("served timeline after a synchronous promotion: %q %v", tl, err)
			}
		})
	}
}
