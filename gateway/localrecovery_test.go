package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// memServing is a gateway.Store and ServingStore in memory; lastRun, if
// set, is what LastRun fails with.
type memServing struct {
	mu      sync.Mutex
	fences  map[string]int64
	busy    bool
	marks   []string
	lastRun error
}

func (m *memServing) LoadFence(ctx context.Context, r string) (fencegate.FenceState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.fences[r]
	st := fencegate.FenceState{Resource: r, Highest: h, Ready: true}
	if h > 0 {
		st.UpdatedAt = time.Now()
	}
	return st, nil
}

func (m *memServing) AdvanceFence(ctx context.Context, r string, token int64, owner string) (fencegate.FenceState, error) {
	m.mu.Lock()
	m.fences[r] = max(m.fences[r], token)
	m.mu.Unlock()
	return m.LoadFence(ctx, r)
}

func (m *memServing) LastRun(ctx context.Context) (gateway.PreviousRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return gateway.PreviousRun{Unclean: m.busy}, m.lastRun
}

func (m *memServing) MarkServing(ctx context.Context, busy bool, bound time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.busy = busy
	m.marks = append(m.marks, map[bool]string{true: "busy", false: "quiet"}[busy])
	return nil
}

func (m *memServing) MarkDraining(ctx context.Context, resource string, token int64, at time.Time) error {
	return nil
}

func (m *memServing) EndServing(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.busy = false
	m.marks = append(m.marks, "stopped")
	return nil
}

// TestLocalFenceRecoveryUnknownPreviousRun: a store whose serving record
// cannot be read at start (PostgreSQL down) does not stop the start; every
// fence is then treated as advanced over writes in flight (its own token
// waits too), a resource without one is served at once, and the first
// write records busy before it is admitted.
func TestLocalFenceRecoveryUnknownPreviousRun(t *testing.T) {
	st := &memServing{fences: map[string]int64{"/a": 3}, busy: true, lastRun: errors.New("connection refused")}
	const bound = 300 * time.Millisecond
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{Serving: st, ForwardBound: bound})
	start := time.Now()
	rs, err := f.Begin(context.Background())
	if err != nil || !rs.Recovering || !strings.Contains(rs.Reason, "could not be read") {
		t.Fatalf("Begin = %+v, %v; want recovering, saying the record could not be read", rs, err)
	}
	if len(st.marks) != 0 {
		t.Fatalf("marks at start: %v; want none (the record is left as it was)", st.marks)
	}
	admit(t, f, "/new", 1).Release()
	if d := time.Since(start); d > bound/2 {
		t.Fatalf("a resource without a fence waited %v", d)
	}
	if st.marks[0] != "busy" {
		t.Fatalf("marks %v; want busy before the first forward", st.marks)
	}
	admit(t, f, "/a", 3).Release()
	if d := time.Since(start); d < bound-20*time.Millisecond {
		t.Fatalf("/a@3 admitted %v after the start; want it held until the bound %v", d, bound)
	}
}

// checkedServing is memServing that checks, as each record lands, that
// no admitted write is outstanding when the record says quiet.
type checkedServing struct {
	memServing
	outstanding *atomic.Int64
	violations  atomic.Int64
}

func (c *checkedServing) MarkServing(ctx context.Context, busy bool, bound time.Duration) error {
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // a durable write takes a while
	if !busy && c.outstanding.Load() != 0 {
		c.violations.Add(1)
	}
	return c.memServing.MarkServing(ctx, busy, bound)
}

// TestLocalFenceQuiescenceRandomized: writers come and go at random, the
// fence records itself quiet after 1ms with none in flight. Never is the
// record quiet while a write the fence admitted is outstanding, and every
// admitted write finds the record busy.
func TestLocalFenceQuiescenceRandomized(t *testing.T) {
	var outstanding atomic.Int64
	st := &checkedServing{memServing: memServing{fences: map[string]int64{}}, outstanding: &outstanding}
	f := gateway.NewLocalFence(st, gateway.LocalFenceOptions{Serving: st, QuietAfter: time.Millisecond})
	if _, err := f.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	var notBusy atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for w := range 3 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
				p, err := f.Admit(context.Background(), gateway.Write{Resource: fmt.Sprint("/r", w%3), Token: 1})
				if err != nil {
					t.Error(err)
					return
				}
				outstanding.Add(1)
				st.mu.Lock()
				if !st.busy {
					notBusy.Add(1)
				}
				st.mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				outstanding.Add(-1)
				p.Release()
			}
		})
	}
	wg.Wait()
	st.mu.Lock()
	n := len(st.marks)
	st.mu.Unlock()
	if v, b := st.violations.Load(), notBusy.Load(); v != 0 || b != 0 {
		t.Fatalf("%d quiet records with writes outstanding, %d writes admitted with the record not busy (%d records)", v, b, n)
	}
	if n < 6 {
		t.Fatalf("only %d records written: the quiet periods were not exercised", n)
	}
	t.Logf("%d serving records over %d fence marks", n, f.QuiescenceMarks())
}
