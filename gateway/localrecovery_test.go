package gateway_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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
