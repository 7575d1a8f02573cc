package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestSharedFenceBehindPgBouncer: the markers are session-level advisory
// locks. Behind PgBouncer in session mode the shared fence works (a drain
// across two replicas, each through the pooler); in transaction mode it is
// refused with ErrPoolMode, by the fence at start and by
// CheckSessionPooling (fencegate doctor).
func TestSharedFenceBehindPgBouncer(t *testing.T) {
	pg := testenv.Postgres(t)
	openFenceStore(t, pg.URL, Options{}) // migrations, directly
	ctx := context.Background()
	if err := CheckSessionPooling(ctx, pg.URL); err != nil {
		t.Fatalf("direct connection: %v; want nil", err)
	}

	t.Run("session", func(t *testing.T) {
		url := testenv.PgBouncer(t, pg, "session")
		if err := CheckSessionPooling(ctx, url); err != nil {
			t.Fatalf("CheckSessionPooling in session mode: %v; want nil", err)
		}
		var fs []*SharedFence
		for range 2 {
			st := openFenceStore(t, url, Options{MaxConns: 4, SkipMigrate: true})
			fs = append(fs, newShared(t, st, SharedFenceOptions{}))
		}
		old := mustAdmit(t, fs[0], "/b", 1)
		done := make(chan error, 1)
		var released bool
		go func() {
			p, err := fs[1].Admit(ctx, gateway.Write{Resource: "/b", Token: 2, DrainTimeout: 10 * time.Second})
			if err == nil {
				if !released {
					err = errors.New("token 2 admitted while token 1 was in flight")
				}
				p.Release()
			}
			done <- err
		}()
		waitFor(t, func() bool { s, _ := fs[1].State(ctx, "/b"); return s.Highest == 2 })
		time.Sleep(100 * time.Millisecond)
		released = true
		old.Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("transaction", func(t *testing.T) {
		url := testenv.PgBouncer(t, pg, "transaction")
		if err := CheckSessionPooling(ctx, url); !errors.Is(err, ErrPoolMode) {
			t.Fatalf("CheckSessionPooling in transaction mode: %v; want ErrPoolMode", err)
		}
		st := openFenceStore(t, url, Options{MaxConns: 4, SkipMigrate: true})
		f := NewSharedFence(st, SharedFenceOptions{})
		defer f.Close()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := f.Ready(rctx); !errors.Is(err, ErrPoolMode) {
			t.Fatalf("shared fence in transaction mode: %v; want ErrPoolMode", err)
		}
		if _, err := f.Admit(ctx, gateway.Write{Resource: "/b", Token: 1}); err == nil {
			t.Fatal("a write was admitted through a pooler in transaction mode")
		}
	})

	// Other clients of the pooler (the store's own pool at start: the
	// replication check, the coordinator) take the marker's server between
	// the check's statements and give it back, so one probe can find the
	// server "its own" by luck. The check must see through it every time.
	t.Run("transaction, busy pooler", func(t *testing.T) {
		url := testenv.PgBouncer(t, pg, "transaction")
		st := openFenceStore(t, url, Options{MaxConns: 8, SkipMigrate: true})
		nctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for nctx.Err() == nil {
					st.Pool.Exec(nctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol)
				}
			}()
		}
		defer func() { stop(); wg.Wait() }()
		for i := range 60 {
			if err := CheckSessionPooling(ctx, url); !errors.Is(err, ErrPoolMode) {
				t.Fatalf("check %d behind a busy pooler in transaction mode: %v; want ErrPoolMode", i, err)
			}
		}
	})

	// Several replicas' marker sessions connecting at once take servers
	// from each other between the check's statements, so a lane that tried
	// again after a refusal could find its session "of its own" by luck, and
	// the fence would come up. Every fence must still be refused after its
	// lanes had time for many tries.
	t.Run("transaction, concurrent", func(t *testing.T) {
		url := testenv.PgBouncer(t, pg, "transaction")
		errs := make(chan error, 6)
		for range cap(errs) {
			st := openFenceStore(t, url, Options{MaxConns: 4, SkipMigrate: true})
			go func() {
				f := NewSharedFence(st, SharedFenceOptions{MarkerConns: 3})
				defer f.Close()
				time.Sleep(3 * time.Second)
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				errs <- f.Ready(rctx)
			}()
		}
		for range cap(errs) {
			if err := <-errs; !errors.Is(err, ErrPoolMode) {
				t.Fatalf("one of 6 shared fences in transaction mode: %v; want ErrPoolMode", err)
			}
		}
	})
}
