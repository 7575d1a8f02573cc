package postgres

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestDirectSQLCannotLowerFence: invariant I7 holds in the database itself.
func TestDirectSQLCannotLowerFence(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	ctx := context.Background()
	if _, err := st.AdvanceFence(ctx, "/l", 42, "b"); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE fence SET highest = 41 WHERE resource = '/l'`,
		`UPDATE fence SET highest = highest - 1`,
		`DELETE FROM fence WHERE resource = '/l'`,
		`TRUNCATE fence`,
		`UPDATE fence SET resource = '/other' WHERE resource = '/l'`,
		`INSERT INTO fence (resource, highest) VALUES ('/l', 1) ON CONFLICT (resource) DO UPDATE SET highest = EXCLUDED.highest`,
	} {
		if _, err := st.Pool.Exec(ctx, sql); err == nil {
			t.Errorf("%s: succeeded; want an error", sql)
		}
	}
	got, err := st.LoadFence(ctx, "/l")
	if err != nil || got.Highest != 42 {
		t.Fatalf("after the attempts: %+v, %v; want highest 42", got, err)
	}
}

func TestStoreAdvanceFence(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	ctx := context.Background()
	steps := []struct {
		token int64
		want  int64
	}{{5, 5}, {3, 5}, {5, 5}, {9, 9}, {8, 9}}
	if got, err := st.LoadFence(ctx, "/s"); err != nil || got.Highest != 0 {
		t.Fatalf("load of a new resource: %+v, %v; want highest 0", got, err)
	}
	for _, s := range steps {
		got, err := st.AdvanceFence(ctx, "/s", s.token, "o")
		if err != nil || got.Highest != s.want {
			t.Fatalf("advance to %d: %+v, %v; want highest %d", s.token, got, err, s.want)
		}
	}
	// The advance is committed synchronously even where the session
	// default is asynchronous commit.
	conn, err := st.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	queueAdvance(b, "/s", 10, "o")
	b.Queue("SHOW synchronous_commit")
	br := conn.SendBatch(ctx, b)
	for range 4 {
		if _, err := br.Exec(); err != nil {
			t.Fatal(err)
		}
	}
	var sc string
	if err := br.QueryRow().Scan(&sc); err != nil {
		t.Fatal(err)
	}
	br.Close()
	if sc != "off" {
		t.Fatalf("session setting after the advance: %s; want off restored (SET LOCAL)", sc)
	}
	// The LocalFence over this store: the request path is the same.
	lf := gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	if _, err := lf.Admit(ctx, gateway.Write{Resource: "/s", Token: 9}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("local fence on postgres, token 9 after 10: %v; want stale", err)
	}
	mustAdmit(t, lf, "/s", 11).Release()
	if got, _ := st.LoadFence(ctx, "/s"); got.Highest != 11 {
		t.Fatalf("stored highest %d; want 11", got.Highest)
	}
}

// TestLocalFenceVerify: the local fence consults Verify only before an
// advance, and a refused token does not raise the stored fence.
func TestLocalFenceVerify(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{})
	var calls atomic.Int64
	lf := gateway.NewLocalFence(st, gateway.LocalFenceOptions{Verify: func(ctx context.Context, resource string, token int64) error {
		calls.Add(1)
		if token > 10 {
			return &fencegate.Error{Code: fencegate.CodeUnknownToken, Resource: resource, Token: token}
		}
		return nil
	}})
	ctx := context.Background()
	if _, err := lf.Admit(ctx, gateway.Write{Resource: "/lv", Token: 1 << 50}); code(err) != fencegate.CodeUnknownToken {
		t.Fatalf("forged token: %v; want unknown_fencing_token", err)
	}
	for range 3 {
		mustAdmit(t, lf, "/lv", 7).Release()
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("verify called %d times; want 2", n)
	}
	if got, _ := st.LoadFence(ctx, "/lv"); got.Highest != 7 {
		t.Fatalf("stored highest %d; want 7", got.Highest)
	}
}
