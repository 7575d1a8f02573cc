package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/recorder"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func newEnv(t *testing.T) *env {
	t.Helper()
	e, err := startEnv()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits for the lease's context, bounded so a lease that is never
// cancelled fails the test instead of hanging it.
func waitDone(t *testing.T, l *client.Lease) error {
	t.Helper()
	select {
	case <-l.Done():
		return context.Cause(l.Context())
	case <-time.After(10 * time.Second):
		t.Fatalf("lease context of %s token %d not cancelled", l.Resource, l.Token)
		return nil
	}
}

func TestLeaseRenewsUntilClose(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	c := &client.Client{URL: e.Coordinator, Owner: "A"}
	// A TTL that leaves renewal ample slack on a loaded machine: renewal
	// runs every second and has until 2.7s after the last success. (With
	// 1.5s, a CI run under -race with every package at once lost the
	// lease: no renewal succeeded within 1.35s.)
	l, err := c.Acquire(ctx, "/orders/7", client.Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// More than two TTLs pass; renewal keeps the lease (same token).
	time.Sleep(7 * time.Second)
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while renewing: %v", err)
	}
	rec, err := c.Show(ctx, "/orders/7")
	if err != nil || !rec.Held || rec.Owner != "A" || rec.Token != l.Token {
		t.Fatalf("Show = %+v, %v; want A holding token %d", rec, err, l.Token)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), client.ErrClosed) {
		t.Errorf("Err after Close = %v; want ErrClosed", l.Err())
	}
	rec, err = c.Show(ctx, "/orders/7")
	if err != nil || rec.Held {
		t.Errorf("Show after Close = %+v, %v; want released", rec, err)
	}
	// Held by someone else: Acquire fails with ErrHeld naming the holder.
	other, err := c.Acquire(ctx, "/orders/8", client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = (&client.Client{URL: e.Coordinator, Owner: "B"}).Acquire(ctx, "/orders/8", client.Options{})
	if !errors.Is(err, client.ErrHeld) || !strings.Contains(err.Error(), "held by A") {
		t.Errorf("Acquire of a held lease = %v; want ErrHeld naming A", err)
	}
}

func TestLeaseLostCancelsContext(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	c := &client.Client{URL: e.Coordinator, Owner: "A"}
	// 3s, not less: the next renewal (within a second) must find the
	// record gone before the lease could expire on a loaded machine
	// (ErrExpired instead of ErrLost).
	l, err := c.Acquire(ctx, "/orders/7", client.Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The record ends behind the worker's back (an operator, or a duplicate
	// worker with the same identity): the next renewal finds it lost.
	if ok, err := c.Release(ctx, "/orders/7", l.Token); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if err := waitDone(t, l); !errors.Is(err, client.ErrLost) {
		t.Errorf("cause = %v; want ErrLost", err)
	}
}

// blockable is a transport that, once blocked, holds every request until
// its context ends: the network to the coordinator is cut.
type blockable struct {
	blocked atomic.Bool
	held    atomic.Int32
}

func (b *blockable) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.blocked.Load() {
		b.held.Add(1)
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Seed test 8: worker A is cut off from the coordinator while it still
// reaches the gateway. Its lease context is cancelled before its lease
// could pass on, a write through its RoundTripper is not even sent, and a
// write with its token (one already prepared, or a worker that ignores its
// context) is refused once B's newer token reached the gateway. The
// upstream's history is the proof.
func TestSeed8CutOffFromCoordinator(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	net := &blockable{}
	a := &client.Client{URL: e.Coordinator, Owner: "A", HTTPClient: &http.Client{Transport: net}}
	la, err := a.Acquire(ctx, "/orders/7", client.Options{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	viaA := &http.Client{Transport: la.RoundTripper(nil)}
	if st := put(t, viaA, e.Gateway+"/orders/7", "", "A1"); st != http.StatusOK {
		t.Fatalf("A's first write = %d", st)
	}

	net.blocked.Store(true)
	if err := waitDone(t, la); !errors.Is(err, client.ErrExpired) {
		t.Fatalf("A's lease ended with %v; want ErrExpired", err)
	}
	if net.held.Load() == 0 {
		t.Errorf("no renewal was attempted over the cut network")
	}

	b := &client.Client{URL: e.Coordinator, Owner: "B"}
	lb, err := b.Acquire(ctx, "/orders/7", client.Options{TTL: time.Minute, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if lb.Token <= la.Token {
		t.Fatalf("B's token %d not above A's %d", lb.Token, la.Token)
	}
	if st := put(t, &http.Client{Transport: lb.RoundTripper(nil)}, e.Gateway+"/orders/7", "", "B1"); st != http.StatusOK {
		t.Fatalf("B's write = %d", st)
	}

	// A's RoundTripper refuses to send once the lease is gone.
	req, _ := http.NewRequest(http.MethodPut, e.Gateway+"/orders/7", strings.NewReader("A2"))
	if _, err := viaA.Do(req); !errors.Is(err, client.ErrExpired) {
		t.Errorf("write through A's RoundTripper after loss = %v; want ErrExpired without sending", err)
	}
	// A write carrying A's token anyway is refused by the gateway.
	if st := put(t, http.DefaultClient, e.Gateway+"/orders/7", strconv.FormatInt(la.Token, 10), "A3"); st != http.StatusConflict {
		t.Errorf("A's late write = %d; want 409", st)
	}

	h := e.Rec.HistoryOf("/orders/7")
	want := "PUT A1@" + strconv.FormatInt(la.Token, 10) + ", PUT B1@" + strconv.FormatInt(lb.Token, 10)
	if got := recorder.Summary(h); got != want {
		t.Errorf("upstream history = %s; want %s", got, want)
	}
	if v, _ := e.Rec.Get("/orders/7"); v != "B1" {
		t.Errorf("upstream state = %q; want B1", v)
	}
}

func put(t *testing.T, hc *http.Client, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The client's calls carry the W3C trace context of the caller's span when
// a propagator is set.
func TestTraceContextPropagated(t *testing.T) {
	e := newEnv(t)
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(prev)

	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		mu.Unlock()
		r.URL.Scheme, r.URL.Host, r.RequestURI = "http", strings.TrimPrefix(e.Coordinator, "http://"), ""
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		var buf [4096]byte
		n, _ := resp.Body.Read(buf[:])
		w.Write(buf[:n])
	}))
	defer proxy.Close()

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(testCtx(t), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	c := &client.Client{URL: proxy.URL, Owner: "A"}
	rec, err := c.AcquireOnce(ctx, "/orders/7", client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "/orders/7", rec.Token); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Errorf("traceparent headers = %q; want %q on both calls", seen, want)
	}
}
