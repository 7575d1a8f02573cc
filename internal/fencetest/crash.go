package fencetest

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// OpenStore opens the durable state of one test again (a process
// starting) and returns a function that closes it (the process exiting).
// Closing the store without the fence's Close is a crash as far as the
// serving record goes: it says what was durable when the process died.
type OpenStore func(t *testing.T) (gateway.Store, func())

// crashBound is the forward bound of the crash cases' routes; longBound
// that of another route's keys (/long/...), the longest.
const (
	crashBound = 600 * time.Millisecond
	longBound  = 4 * crashBound
)

// RunCrash is the crash contract of a local fence over a store that keeps
// the serving record (gateway.ServingStore; docs/design.md "After a crash
// (local fence)"): a process that crashed with nothing in flight is
// waited out by nobody; one that crashed with writes in flight holds only
// the writes that could land before them (a newer token on a resource
// that had a fence, any token of a fence advanced over older writes in
// flight), at most the resource's bound from the restart; a crash while
// recovering leaves the next process recovering too. Every store runs it.
func RunCrash(t *testing.T, newState func(t *testing.T) OpenStore) {
	t.Run("Quiet", func(t *testing.T) { testCrashQuiet(t, newState(t)) })
	t.Run("InFlight", func(t *testing.T) { testCrashInFlight(t, newState(t)) })
	t.Run("AdvancedOverInFlight", func(t *testing.T) { testCrashDraining(t, newState(t)) })
}

// process is one gateway process's fence over the state.
type process struct {
	f     *gateway.LocalFence
	close func()
	start time.Time
}

func startProcess(t *testing.T, open OpenStore) *process {
	t.Helper()
	st, closeStore := open(t)
	sv, ok := st.(gateway.ServingStore)
	if !ok {
		t.Fatalf("%T keeps no serving record (gateway.ServingStore)", st)
	}
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{
		Serving: sv, ForwardBound: longBound, QuietAfter: 50 * time.Millisecond,
		RecoveryBound: func(resource string) time.Duration {
			if len(resource) > 6 && resource[:6] == "/long/" {
				return longBound
			}
			return crashBound
		},
	})
	p := &process{f: f, close: closeStore, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Begin(ctx); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return p
}

// crash ends the process as kill -9 would: the store is closed with no
// serving record written.
func (p *process) crash() { p.close() }

// timedAdmit admits a write and returns how long the admission took.
func timedAdmit(t *testing.T, f gateway.Fence, resource string, token int64) (gateway.Permit, time.Duration) {
	t.Helper()
	start := time.Now()
	p, err := f.Admit(context.Background(), gateway.Write{Resource: resource, Token: token, DrainTimeout: time.Minute})
	if err != nil {
		t.Fatalf("admit %s@%d: %v", resource, token, err)
	}
	return p, time.Since(start)
}

// atOnce admits a write that must not wait for the recovery.
func atOnce(t *testing.T, f gateway.Fence, resource string, token int64) {
	t.Helper()
	p, d := timedAdmit(t, f, resource, token)
	p.Release()
	if d > 300*time.Millisecond {
		t.Fatalf("%s@%d waited %v; want no wait", resource, token, d)
	}
}

// heldUntil admits a write that must wait until about start+bound (start:
// the restart, or when the write it waits for began).
func heldUntil(t *testing.T, f gateway.Fence, resource string, token int64, start time.Time, bound time.Duration) {
	t.Helper()
	p, _ := timedAdmit(t, f, resource, token)
	p.Release()
	if got := time.Since(start); got < bound-50*time.Millisecond {
		t.Fatalf("%s@%d admitted %v after its start; want it held until the bound %v", resource, token, got, bound)
	}
}

// testCrashQuiet: nothing in flight for a moment before the crash, nothing
// waits after it, a new resource and an advance alike.
func testCrashQuiet(t *testing.T, open OpenStore) {
	p := startProcess(t, open)
	admit(t, p.f, "/a", 1).Release()
	waitFor(t, func() bool { return p.f.QuiescenceMarks() >= 2 }) // busy, then quiet
	p.crash()

	p = startProcess(t, open)
	defer p.close()
	if st := p.f.Recovery(); st.Recovering {
		t.Fatalf("recovering after a quiet crash: %+v", st)
	}
	atOnce(t, p.f, "/a", 2)
	atOnce(t, p.f, "/new", 1)
}

// testCrashInFlight: a write in flight at the crash. Its own token and new
// resources are served at once; a newer token waits for the resource's
// own bound, not the longest; a crash while recovering keeps the next
// process recovering.
func testCrashInFlight(t *testing.T, open OpenStore) {
	p := startProcess(t, open)
	admit(t, p.f, "/b", 5).Release()
	admit(t, p.f, "/long/c", 5).Release()
	admit(t, p.f, "/a", 1) // in flight at the crash
	p.crash()

	// A crash before any write: still recovering afterwards.
	p = startProcess(t, open)
	if st := p.f.Recovery(); !st.Recovering || st.Reason == "" {
		t.Fatalf("status after a crash with a write in flight: %+v; want recovering, with a reason", st)
	}
	p.crash()

	p = startProcess(t, open)
	defer p.close()
	st := p.f.Recovery()
	if !st.Recovering || st.Until.Before(p.start.Add(longBound-100*time.Millisecond)) {
		t.Fatalf("status: %+v; want recovering until the longest bound", st)
	}
	atOnce(t, p.f, "/new", 7) // no fence: nothing was in flight there
	atOnce(t, p.f, "/a", 1)   // the token of the write in flight
	atOnce(t, p.f, "/b", 5)   // the fence did not move over a write in flight
	held := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(crashBound)
		for time.Now().Before(deadline) && p.f.Recovery().Held != 1 {
			time.Sleep(5 * time.Millisecond)
		}
		held <- p.f.Recovery().Held == 1
	}()
	heldUntil(t, p.f, "/a", 2, p.start, crashBound) // /a@1 may still land
	if !<-held {
		t.Fatal("the status never counted /a as held")
	}
	if d := time.Since(p.start); d > 3*crashBound {
		t.Fatalf("/a@2 held %v; want its own bound %v, not the longest %v", d, crashBound, longBound)
	}
	if _, err := p.f.Admit(context.Background(), gateway.Write{Resource: "/a", Token: 1}); Code(err) != fencegate.CodeStaleToken {
		t.Fatalf("/a@1 after /a@2: %v; want stale", err)
	}
	heldUntil(t, p.f, "/long/c", 6, p.start, longBound) // the other route's bound
	if st := p.f.Recovery(); st.Recovering {
		t.Fatalf("still recovering after the longest bound: %+v", st)
	}
}

// testCrashDraining: a newer token advanced while an older write was in
// flight, then the crash: the newer token's writes wait too, since the
// older write may still land.
func testCrashDraining(t *testing.T, open OpenStore) {
	p := startProcess(t, open)
	admit(t, p.f, "/d", 1) // in flight at the crash
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	advanced := time.Now()
	go p.f.Admit(ctx, gateway.Write{Resource: "/d", Token: 2, DrainTimeout: time.Minute}) // advances, then waits for /d@1
	waitFor(t, func() bool {
		st, err := p.f.State(context.Background(), "/d")
		return err == nil && st.Highest == 2
	})
	p.crash()
	cancel()

	p = startProcess(t, open)
	defer p.close()
	// /d@1 ends at most its bound after the advance (less than after the
	// restart: the rule may use it).
	heldUntil(t, p.f, "/d", 2, advanced, crashBound)
	heldUntil(t, p.f, "/d", 3, p.start, crashBound) // a newer token: the restart's bound
}
