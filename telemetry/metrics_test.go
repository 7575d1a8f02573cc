package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/telemetry"
)

// The counters move by exactly one per request, by route and decision.
func TestMetricsPerDecision(t *testing.T) {
	for _, tracing := range []bool{false, true} {
		t.Run(fmt.Sprintf("tracing=%v", tracing), func(t *testing.T) {
			h := newHarness(t, tracing)
			m := h.tel.Metrics
			steps := []struct {
				path  string
				token int64
				want  int
			}{
				{"/orders/1", 5, 200}, // advance to 5
				{"/orders/1", 5, 200}, // same token: no advance
				{"/orders/1", 4, 409}, // stale
				{"/orders/1", 3, 409}, // stale
				{"/orders/2", 1, 200}, // advance
				{"/orders/1", 6, 200}, // advance
			}
			for _, s := range steps {
				if got := h.put(t, s.path, s.token, "", "v"); got != s.want {
					t.Fatalf("PUT %s token %d: %d; want %d", s.path, s.token, got, s.want)
				}
			}
			for _, c := range []struct {
				name string
				got  float64
				want float64
			}{
				{"requests forwarded", testutil.ToFloat64(m.Requests.WithLabelValues("orders", "forwarded")), 4},
				{"requests stale", testutil.ToFloat64(m.Requests.WithLabelValues("orders", "stale")), 2},
				{"stale refusals", testutil.ToFloat64(m.StaleRefusals.WithLabelValues("orders")), 2},
				{"advances", testutil.ToFloat64(m.Advances), 3},
				{"store errors", testutil.ToFloat64(m.StoreErrors.WithLabelValues("advance")), 0},
				{"fence checks", float64(histCount(t, h, "fencegate_fence_check_duration_seconds")), 6},
				{"upstream calls", float64(histCount(t, h, "fencegate_upstream_duration_seconds")), 4},
				{"highest token", gauge(t, h, "fencegate_fence_highest_token"), 6},
			} {
				if c.got != c.want {
					t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

// A store failure fails the write closed, counts a store error and marks
// the server span as an error (a 5xx is the server's failure).
func TestStoreErrorFailsClosed(t *testing.T) {
	h := newHarness(t, true)
	h.store.mu.Lock()
	h.store.fail = errors.New("disk on fire")
	h.store.mu.Unlock()
	if got := h.put(t, "/orders/9", 3, "00-"+staleTrace+"-"+staleParent+"-01", "v"); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d; want 503", got)
	}
	if n := len(h.rec.History()); n != 0 {
		t.Fatalf("upstream applied %d writes; want none", n)
	}
	m := h.tel.Metrics
	if got := testutil.ToFloat64(m.StoreErrors.WithLabelValues("load")); got != 1 {
		t.Errorf("store errors (load) = %v; want 1", got)
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("orders", fencegate.CodeFenceUnavailable)); got != 1 {
		t.Errorf("requests fence_unavailable = %v; want 1", got)
	}
	tid, _ := trace.TraceIDFromHex(staleTrace)
	var sawServer, sawStore bool
	for _, s := range spansOfTrace(h.ended(t), tid) {
		switch s.Name {
		case "fence.store.load":
			sawStore = s.Status.Code == codes.Error
		default:
			if s.SpanKind == trace.SpanKindServer {
				sawServer = s.Status.Code == codes.Error &&
					attrs(s.Attributes)[telemetry.AttrDecision].AsString() == fencegate.CodeFenceUnavailable
			}
		}
	}
	if !sawServer || !sawStore {
		t.Errorf("server span error with decision fence_unavailable: %v; store span error: %v", sawServer, sawStore)
	}
}

// A newer write that waits for an older one in flight (I2) is measured
// once in the drain histogram and leaves a fencing.drain event.
func TestDrainWaitObserved(t *testing.T) {
	h := newHarness(t, true)
	arrived, release := make(chan struct{}), make(chan struct{})
	h.rec.Delay = func(r *http.Request) {
		if r.Header.Get("Fencing-Token") == "1" {
			close(arrived)
			<-release
		}
	}
	first := make(chan int)
	go func() { first <- h.put(t, "/orders/3", 1, "", "old") }()
	<-arrived
	second := make(chan int)
	go func() { second <- h.put(t, "/orders/3", 2, "", "new") }()
	// Token 2 has advanced the fence and now waits for token 1's drain.
	for {
		st, err := h.fence.State(context.Background(), "/orders/3")
		if err != nil {
			t.Fatal(err)
		}
		if st.Highest == 2 && !st.Ready {
			break
		}
		waitBriefly()
	}
	close(release)
	if got := <-first; got != 200 {
		t.Fatalf("token 1: %d; want 200 (its body was sent whole before token 2 came)", got)
	}
	if got := <-second; got != 200 {
		t.Fatalf("token 2: %d; want 200", got)
	}
	if hist := h.rec.HistoryOf("/orders/3"); len(hist) != 2 || hist[1].Token != "2" {
		t.Fatalf("history %s; want token 1 then token 2", recorder.Summary(hist))
	}
	if got := histCount(t, h, "fencegate_fence_drain_wait_seconds"); got != 1 {
		t.Errorf("drain waits = %d; want 1", got)
	}
	var events int
	for _, s := range h.ended(t) {
		if s.Name != "fence.admit" {
			continue
		}
		for _, e := range s.Events {
			if e.Name == "fencing.drain" {
				events++
			}
		}
	}
	if events != 1 {
		t.Errorf("fencing.drain events = %d; want 1", events)
	}
}

func histCount(t *testing.T, h *harness, name string) uint64 {
	t.Helper()
	mfs, err := h.tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func gauge(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.tel.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// waitBriefly paces a loop that polls for a state; no assertion depends on
// how long anything takes.
func waitBriefly() { time.Sleep(time.Millisecond) }
