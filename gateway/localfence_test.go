package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/httprefusal"
)

func openStore(t testing.TB) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func code(err error) string {
	var e *fencegate.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

func admit(t *testing.T, f gateway.Fence, res string, tok int64) gateway.Permit {
	t.Helper()
	p, err := f.Admit(context.Background(), gateway.Write{Resource: res, Token: tok})
	if err != nil {
		t.Fatalf("Admit(%s, %d): %v", res, tok, err)
	}
	return p
}

func TestLocalFenceOrder(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	admit(t, f, "r", 41).Release()
	admit(t, f, "r", 42).Release()
	admit(t, f, "r", 42).Release() // repeated token: fine
	_, err := f.Admit(context.Background(), gateway.Write{Resource: "r", Token: 41})
	if code(err) != fencegate.CodeStaleToken {
		t.Fatalf("token 41 after 42: %v; want stale", err)
	}
	var e *fencegate.Error
	errors.As(err, &e)
	if e.Highest != 42 || e.Token != 41 || httprefusal.Status(e) != 409 {
		t.Fatalf("refusal %+v", e)
	}
	// Other resources are independent.
	admit(t, f, "other", 1).Release()
}

// TestLocalFenceDurable proves I1 across a restart of the fence: the
// advance is in the store file before the write is admitted.
func TestLocalFenceDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	p := admit(t, f, "r", 42)
	// Still in flight: the advance must already be durable (I3).
	st.Close()
	p.Release()

	st, err = bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f = gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "r", Token: 41}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("after reopen, token 41: %v; want stale", err)
	}
}

// TestLocalFenceDrain proves I2: a newer token waits until the older write
// in flight (whose body was fully sent) has finished.
func TestLocalFenceDrain(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	old := admit(t, f, "r", 41) // BodySent nil: fully sent, cannot be aborted
	admitted := make(chan struct{})
	go func() {
		p := admit(t, f, "r", 42)
		close(admitted)
		p.Release()
	}()
	select {
	case <-admitted:
		t.Fatal("token 42 admitted while 41 was still in flight")
	case <-time.After(100 * time.Millisecond):
	}
	// Meanwhile 41 is stale for newcomers even though it is in flight.
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "r", Token: 41}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("second 41 during drain: %v; want stale", err)
	}
	st, _ := f.State(context.Background(), "r")
	if st.Highest != 42 || st.Ready {
		t.Fatalf("state during drain %+v; want highest 42, not ready", st)
	}
	old.Release()
	select {
	case <-admitted:
	case <-time.After(5 * time.Second):
		t.Fatal("token 42 not admitted after 41 finished")
	}
}

// TestLocalFenceAbort: an older write whose body is still being sent is
// aborted when a newer token advances, and the newer one does not wait.
func TestLocalFenceAbort(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	var aborted atomic.Bool
	var old gateway.Permit
	old, err := f.Admit(context.Background(), gateway.Write{
		Resource: "r", Token: 41,
		Abort: func(cause error) {
			if !errors.Is(cause, gateway.ErrSuperseded) {
				t.Errorf("abort cause %v; want ErrSuperseded", cause)
			}
			aborted.Store(true)
		},
		BodySent: func() bool { return false },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan gateway.Permit)
	go func() { done <- admit(t, f, "r", 42) }()
	// The abort makes the old forward fail, which releases its permit.
	deadline := time.After(5 * time.Second)
	for !aborted.Load() {
		select {
		case <-deadline:
			t.Fatal("older write not aborted")
		case <-time.After(time.Millisecond):
		}
	}
	old.Release()
	(<-done).Release()
}

func TestLocalFenceDrainTimeout(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{DrainTimeout: 50 * time.Millisecond})
	old := admit(t, f, "r", 41)
	defer old.Release()
	_, err := f.Admit(context.Background(), gateway.Write{Resource: "r", Token: 42})
	if code(err) != fencegate.CodeFenceDraining {
		t.Fatalf("newer write while older stuck: %v; want fence_draining", err)
	}
	// The advance itself stands: 41 is stale from now on.
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "r", Token: 41}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("41 after advance to 42: %v; want stale", err)
	}
}

// TestLocalFenceFailClosed proves I4: when the store cannot advance, the
// write is refused with fence_unavailable, and nothing is admitted.
func TestLocalFenceFailClosed(t *testing.T) {
	st := openStore(t)
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{})
	admit(t, f, "cached", 5).Release()
	st.Close() // the store goes away
	for _, w := range []gateway.Write{{Resource: "new", Token: 1}, {Resource: "cached", Token: 6}} {
		_, err := f.Admit(context.Background(), w)
		if code(err) != fencegate.CodeFenceUnavailable {
			t.Fatalf("Admit(%+v) with store closed: %v; want fence_unavailable", w, err)
		}
	}
}

// TestLocalFenceBounded: memory does not grow with the number of distinct
// resources ever seen, and evicted resources keep their fence.
func TestLocalFenceBounded(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{MaxEntries: 128})
	// 16 writers at once: their advances share fsyncs (group commit).
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2000; i += 16 {
				admit(t, f, fmt.Sprintf("r%d", i), 10).Release()
			}
		}()
	}
	wg.Wait()
	if n := gateway.CachedEntries(f); n > 128+64 {
		t.Fatalf("cache holds %d entries; want at most about 128", n)
	}
	if _, err := f.Admit(context.Background(), gateway.Write{Resource: "r0", Token: 9}); code(err) != fencegate.CodeStaleToken {
		t.Fatalf("evicted resource r0 with older token: %v; want stale", err)
	}
}

// TestLocalFenceConcurrent hammers one resource with rising tokens and
// checks that no admitted write ever overlaps a newer admitted write, and no
// token is admitted after a newer one.
func TestLocalFenceConcurrent(t *testing.T) {
	f := gateway.NewLocalFence(openStore(t), gateway.LocalFenceOptions{})
	var mu sync.Mutex
	inflight := map[int64]int{}
	var highestDone int64
	var violations []string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tok := int64(i/4 + w%3)
				p, err := f.Admit(context.Background(), gateway.Write{Resource: "r", Token: tok})
				if err != nil {
					if c := code(err); c != fencegate.CodeStaleToken {
						t.Errorf("unexpected refusal %v", err)
					}
					continue
				}
				mu.Lock()
				for other, n := range inflight {
					if n > 0 && other != tok {
						violations = append(violations, fmt.Sprintf("%d in flight with %d", tok, other))
					}
				}
				if tok < highestDone {
					violations = append(violations, fmt.Sprintf("%d admitted after %d", tok, highestDone))
				}
				inflight[tok]++
				mu.Unlock()
				time.Sleep(50 * time.Microsecond)
				mu.Lock()
				inflight[tok]--
				highestDone = max(highestDone, tok)
				mu.Unlock()
				p.Release()
			}
		}()
	}
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("%d violations, first: %s", len(violations), violations[0])
	}
}
