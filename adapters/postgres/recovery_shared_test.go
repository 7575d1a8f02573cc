package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestSharedFenceLostSessionForgotten: a replica whose marker session was
// lost (its connection closed under it, as a database restart or a
// failover does) while it had nothing in flight, or once the writes it had
// in flight were cut short before their requests went out whole, deletes
// its session's row: the other replica's newer token is admitted at once,
// not after the session's forward timeout (an hour here, which the drain
// timeout could not wait out). A write whose request went out whole may
// still be applied by the upstream: its session is still waited for.
func TestSharedFenceLostSessionForgotten(t *testing.T) {
	fs, st := replicas(t, 2, SharedFenceOptions{ForwardTimeout: time.Hour, MarkerConns: 1})
	r1, r2 := fs[0], fs[1]
	ctx := context.Background()
	admitAfterLoss := func(resource string, token int64) time.Duration {
		t.Helper()
		start := time.Now()
		p, err := r2.Admit(ctx, gateway.Write{Resource: resource, Token: token, DrainTimeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("%s@%d after r1's session was lost: %v", resource, token, err)
		}
		p.Release()
		return time.Since(start)
	}
	session := func(f *SharedFence) *session {
		l := f.lanes[0]
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.sess
	}

	t.Run("nothing in flight", func(t *testing.T) {
		mustAdmit(t, r1, "/q", 1).Release()
		session(r1).conn.PgConn().Conn().Close()
		if d := admitAfterLoss("/q", 2); d > 5*time.Second {
			t.Fatalf("token 2 waited %v", d)
		}
	})

	t.Run("its write ended", func(t *testing.T) {
		waitFor(t, func() bool { return session(r1) != nil })
		var p gateway.Permit
		var err error
		p, err = r1.Admit(ctx, gateway.Write{Resource: "/w", Token: 1, BodySent: func() bool { return false }, Abort: func(error) {
			// Its body not sent whole, the gateway's forward ends when it
			// is aborted (the connection torn down with the request
			// incomplete, never applied), and so does the write.
			go p.Release()
		}})
		if err != nil {
			t.Fatal(err)
		}
		session(r1).conn.PgConn().Conn().Close()
		if d := admitAfterLoss("/w", 2); d > 5*time.Second {
			t.Fatalf("token 2 waited %v", d)
		}
		var n int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM fence_session WHERE dead_at IS NOT NULL`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("dead sessions left: %d, %v; want r1's forgotten", n, err)
		}
	})

	t.Run("its request went out whole", func(t *testing.T) {
		waitFor(t, func() bool { return session(r1) != nil })
		var p gateway.Permit
		var err error
		p, err = r1.Admit(ctx, gateway.Write{Resource: "/s", Token: 1, Abort: func(error) { go p.Release() }})
		if err != nil {
			t.Fatal(err)
		}
		session(r1).conn.PgConn().Conn().Close()
		_, err = r2.Admit(ctx, gateway.Write{Resource: "/s", Token: 2, DrainTimeout: 4 * time.Second})
		if code(err) != fencegate.CodeFenceDraining {
			t.Fatalf("token 2 while r1's write that went out whole may still land: %v; want fence_draining", err)
		}
	})
}
