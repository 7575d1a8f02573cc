package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestSharedFenceFailsClosed: with the database unreachable, writes are
// refused with 503 fence_unavailable, promptly, and nothing is admitted.
func TestSharedFenceFailsClosed(t *testing.T) {
	t.Run("database unreachable", func(t *testing.T) {
		url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/none?sslmode=disable&connect_timeout=1", testenv.FreePort(t))
		st, err := Open(context.Background(), url, Options{SkipMigrate: true, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		f := NewSharedFence(st, SharedFenceOptions{AcquireTimeout: 300 * time.Millisecond})
		defer f.Close()
		_, err = f.Admit(context.Background(), gateway.Write{Resource: "/x", Token: 1})
		var fe *fencegate.Error
		if !errors.As(err, &fe) || fe.Code != fencegate.CodeFenceUnavailable || httprefusal.Status(fe) != http.StatusServiceUnavailable || fe.RetryAfter <= 0 {
			t.Fatalf("admit with the database down: %v; want 503 fence_unavailable with Retry-After", err)
		}
	})
}

// TestSharedFenceLostSession: a replica's marker session dies with a write
// in flight (its connection closed under it, as kill -9 or a cut link do).
// The replica aborts the write, and the newer token through the other
// replica is admitted only after the forward timeout has passed since the
// older write's marker was read: a marker that vanished does not end the
// drain early. The older token stays refused, and the replica gets a new
// session by itself.
func TestSharedFenceLostSession(t *testing.T) {
	const forward = 1500 * time.Millisecond
	fs, _ := replicas(t, 2, SharedFenceOptions{ForwardTimeout: forward, MarkerConns: 1})
	r1, r2 := fs[0], fs[1]
	aborted := make(chan struct{})
	var abortOnce sync.Once
	var cause error
	start := time.Now()
	p, err := r1.Admit(context.Background(), gateway.Write{Resource: "/d", Token: 1, Abort: func(err error) {
		abortOnce.Do(func() { cause = err; close(aborted) })
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	sp := p.(*sharedPermit)
	sp.s.conn.PgConn().Conn().Close() // the session dies
	p2, err := r2.Admit(context.Background(), gateway.Write{Resource: "/d", Token: 2, DrainTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("token 2 after the session holding token 1 died: %v", err)
	}
	admitted := time.Since(start)
	p2.Release()
	if admitted < forward {
		t.Fatalf("token 2 admitted %s after token 1's marker was read; want at least its forward timeout %s", admitted, forward)
	}
	select {
	case <-aborted:
		// The client is told the fence is unavailable, not that its token
		// is stale: nothing newer was accepted when the session died.
		if code(cause) != fencegate.CodeFenceUnavailable {
			t.Fatalf("abort cause %v; want %s", cause, fencegate.CodeFenceUnavailable)
		}
	default:
		t.Fatal("the write whose marker session died was not aborted")
	}
	if _, err := r2.Admit(context.Background(), gateway.Write{Resource: "/d", Token: 1}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 1: %v; want stale", err)
	}
	mustAdmit(t, r1, "/d", 2).Release() // r1 has a new session
}

// TestSharedFenceCleanCloseDoesNotDelayDrains: a replica that stops with
// no write in flight unregisters its sessions: no drain waits for them.
func TestSharedFenceCleanCloseDoesNotDelayDrains(t *testing.T) {
	fs, st := replicas(t, 2, SharedFenceOptions{ForwardTimeout: time.Hour})
	mustAdmit(t, fs[0], "/cc", 1).Release()
	waitFor(t, func() bool { // the unlock went out
		for _, l := range fs[0].lanes {
			l.mu.Lock()
			n := len(l.sess.entries) + len(l.sess.queue)
			l.mu.Unlock()
			if n > 0 {
				return false
			}
		}
		return true
	})
	fs[0].Close()
	var n int
	if err := st.Pool.QueryRow(context.Background(), `SELECT count(*) FROM fence_session WHERE dead_at IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("dead sessions: %d, %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := fs[1].Admit(ctx, gateway.Write{Resource: "/cc", Token: 2})
	if err != nil {
		t.Fatalf("token 2 after a clean close (a drain waiting an hour would time out): %v", err)
	}
	p.Release()
}

// The SQL texts spell the liveness lock's class in decimal; they must say
// the same number as the constant.
func TestSessionLockClassSQL(t *testing.T) {
	if got := strconv.FormatInt(sessionLockClass, 10); got != sessionLockClassSQL {
		t.Fatalf("sessionLockClassSQL = %s; want %s", sessionLockClassSQL, got)
	}
}
