// Package coordinatortest is the contract suite every coordinator.Backend
// passes: the embedded store's and PostgreSQL's run the same tests
// (adapters/bolt/lease_test.go, adapters/postgres/lease_test.go), through
// the backend directly and through a coordinator.Service over it.
package coordinatortest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/coordinator"
)

// Harness adapts one backend implementation to the suite.
type Harness struct {
	// New returns an empty backend, closed at the end of t.
	New func(t *testing.T) coordinator.Backend
	// Reopen closes b's store and opens it again (a restart of the
	// process), returning the new backend.
	Reopen func(t *testing.T, b coordinator.Backend) coordinator.Backend
	// FailAfterDraw arranges for the next acquisition on b that draws a
	// token to fail inside its transaction after the draw. The returned
	// func, called after that failure, reports the drawn token and
	// removes the arrangement.
	FailAfterDraw func(t *testing.T, b coordinator.Backend) (drawn func() int64)
}

// issuer is the read of the highest issued token both backends offer to
// shared fence mode.
type issuer interface {
	Issued(ctx context.Context, resource string) (int64, error)
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(t *testing.T, h Harness)
	}{
		{"AcquireFree", testAcquireFree},
		{"HeldByOther", testHeldByOther},
		{"HolderReacquireKeepsToken", testReacquire},
		{"TakeoverAfterExpiryIssuesNewerToken", testTakeover},
		{"Renew", testRenew},
		{"Release", testRelease},
		{"Seed3LateRenewAndReleaseChangeNothing", testSeed3},
		{"Seed4AbortedAcquisitionGrantsNothing", testSeed4},
		{"TokensSurviveRestart", testReopen},
		{"ServiceWaitWokenByRelease", testServiceWait},
		{"ServiceConcurrentAcquirers", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, h) })
	}
}

const (
	long  = time.Minute
	short = 40 * time.Millisecond
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustAcquire(t *testing.T, b coordinator.Backend, res, owner string, ttl time.Duration) (coordinator.Lease, bool) {
	t.Helper()
	l, fresh, err := b.Acquire(ctx(t), res, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", res, owner, err)
	}
	if l.Token <= 0 || l.Owner != owner || l.Resource != res || !l.Held() {
		t.Fatalf("Acquire(%s, %s) = %+v; want a live lease of %s with a positive token", res, owner, l, owner)
	}
	return l, fresh
}

// expire waits until a lease of ttl acquired before the call has expired
// by the store's clock (the store may run behind this process's clock only
// by the time the call took, so twice the ttl is ample).
func expire(ttl time.Duration) { time.Sleep(2*ttl + 20*time.Millisecond) }

func issued(t *testing.T, b coordinator.Backend, res string) int64 {
	t.Helper()
	is, ok := b.(issuer)
	if !ok {
		t.Fatalf("%T has no Issued method", b)
	}
	n, err := is.Issued(ctx(t), res)
	if err != nil {
		t.Fatalf("Issued(%s): %v", res, err)
	}
	return n
}

func testAcquireFree(t *testing.T, h Harness) {
	b := h.New(t)
	if n := issued(t, b, "/orders/7"); n != 0 {
		t.Fatalf("Issued before any acquisition = %d; want 0", n)
	}
	l, fresh := mustAcquire(t, b, "/orders/7", "A", long)
	if !fresh {
		t.Errorf("first acquisition not reported fresh")
	}
	if l.Remaining <= long/2 || l.Remaining > long {
		t.Errorf("Remaining = %v; want about %v", l.Remaining, long)
	}
	got, err := b.Lease(ctx(t), "/orders/7")
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != l.Token || got.Owner != "A" || !got.Held() || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Errorf("Lease = %+v; want %+v", got, l)
	}
	if n := issued(t, b, "/orders/7"); n != l.Token {
		t.Errorf("Issued = %d; want %d", n, l.Token)
	}
	none, err := b.Lease(ctx(t), "/orders/none")
	if err != nil || none.Token != 0 || none.Held() {
		t.Errorf("Lease of a never-leased resource = %+v, %v; want zero", none, err)
	}
}

func testHeldByOther(t *testing.T, h Harness) {
	b := h.New(t)
	a, _ := mustAcquire(t, b, "r", "A", long)
	got, fresh, err := b.Acquire(ctx(t), "r", "B", long)
	if !errors.Is(err, coordinator.ErrHeld) {
		t.Fatalf("Acquire by B = %v; want ErrHeld", err)
	}
	if fresh || got.Owner != "A" || !got.Held() || !got.ExpiresAt.Equal(a.ExpiresAt) {
		t.Errorf("holder reported = %+v; want A's lease %+v", got, a)
	}
	if n := issued(t, b, "r"); n != a.Token {
		t.Errorf("a refused acquisition changed Issued to %d; want %d", n, a.Token)
	}
}

func testReacquire(t *testing.T, h Harness) {
	b := h.New(t)
	a, _ := mustAcquire(t, b, "r", "A", 10*time.Second)
	again, fresh := mustAcquire(t, b, "r", "A", long)
	if fresh || again.Token != a.Token {
		t.Errorf("re-acquire by the holder = token %d fresh %v; want token %d not fresh", again.Token, fresh, a.Token)
	}
	if !again.ExpiresAt.After(a.ExpiresAt) {
		t.Errorf("re-acquire did not extend the lease: %v, was %v", again.ExpiresAt, a.ExpiresAt)
	}
}

func testTakeover(t *testing.T, h Harness) {
	b := h.New(t)
	a, _ := mustAcquire(t, b, "r", "A", short)
	other, _ := mustAcquire(t, b, "other", "C", long)
	expire(short)
	bl, fresh := mustAcquire(t, b, "r", "B", long)
	if !fresh || bl.Token <= a.Token || bl.Token <= other.Token {
		t.Errorf("takeover token %d (fresh %v); want fresh and above %d and %d", bl.Token, fresh, a.Token, other.Token)
	}
	// The same owner acquiring again after its own expiry is a new lease.
	b2, _ := mustAcquire(t, b, "s", "A", short)
	expire(short)
	b3, fresh := mustAcquire(t, b, "s", "A", long)
	if !fresh || b3.Token <= b2.Token {
		t.Errorf("re-acquire after expiry = token %d fresh %v; want a newer token than %d", b3.Token, fresh, b2.Token)
	}
}

func testRenew(t *testing.T, h Harness) {
	b := h.New(t)
	a, _ := mustAcquire(t, b, "r", "A", 10*time.Second)
	r, err := b.Renew(ctx(t), "r", "A", a.Token, long)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if r.Token != a.Token || !r.ExpiresAt.After(a.ExpiresAt) || r.Remaining <= 10*time.Second {
		t.Errorf("Renew = %+v; want token %d, later expiry", r, a.Token)
	}
	for _, bad := range []struct {
		owner string
		token int64
	}{{"B", a.Token}, {"A", a.Token + 1}, {"A", a.Token - 1}} {
		if _, err := b.Renew(ctx(t), "r", bad.owner, bad.token, long); !errors.Is(err, coordinator.ErrLost) {
			t.Errorf("Renew(%s, %d) = %v; want ErrLost", bad.owner, bad.token, err)
		}
	}
	if _, err := b.Renew(ctx(t), "nothing", "A", a.Token, long); !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("Renew of a never-leased resource = %v; want ErrLost", err)
	}
}

func testRelease(t *testing.T, h Harness) {
	b := h.New(t)
	a, _ := mustAcquire(t, b, "r", "A", long)
	for _, bad := range []struct {
		owner string
		token int64
	}{{"B", a.Token}, {"A", a.Token + 1}} {
		ok, err := b.Release(ctx(t), "r", bad.owner, bad.token)
		if err != nil || ok {
			t.Errorf("Release(%s, %d) = %v, %v; want false", bad.owner, bad.token, ok, err)
		}
	}
	if cur, _ := b.Lease(ctx(t), "r"); !cur.Held() || cur.Owner != "A" {
		t.Fatalf("a foreign release changed the lease: %+v", cur)
	}
	ok, err := b.Release(ctx(t), "r", "A", a.Token)
	if err != nil || !ok {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	ok, err = b.Release(ctx(t), "r", "A", a.Token)
	if err != nil || ok {
		t.Errorf("second Release = %v, %v; want false (idempotent)", ok, err)
	}
	if _, err := b.Renew(ctx(t), "r", "A", a.Token, long); !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("Renew after release = %v; want ErrLost", err)
	}
	bl, fresh := mustAcquire(t, b, "r", "B", long)
	if !fresh || bl.Token <= a.Token {
		t.Errorf("acquire after release = token %d; want newer than %d", bl.Token, a.Token)
	}
	if n := issued(t, b, "r"); n != bl.Token {
		t.Errorf("Issued = %d; want %d", n, bl.Token)
	}
}

// Seed test 3: renew and release delivered after expiry, once B holds the
// lease, change nothing of B's lease.
func testSeed3(t *testing.T, h Harness) {
	b := h.New(t)
	a, _ := mustAcquire(t, b, "/orders/7", "A", short)
	expire(short)
	bl, _ := mustAcquire(t, b, "/orders/7", "B", long)
	if _, err := b.Renew(ctx(t), "/orders/7", "A", a.Token, long); !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("A's late renew = %v; want ErrLost", err)
	}
	if ok, err := b.Release(ctx(t), "/orders/7", "A", a.Token); err != nil || ok {
		t.Errorf("A's late release = %v, %v; want false", ok, err)
	}
	cur, err := b.Lease(ctx(t), "/orders/7")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Owner != "B" || cur.Token != bl.Token || !cur.ExpiresAt.Equal(bl.ExpiresAt) || !cur.Held() {
		t.Fatalf("B's lease after A's late messages = %+v; want unchanged %+v", cur, bl)
	}
	// And a late renew after B released does not revive A's lease either.
	if ok, err := b.Release(ctx(t), "/orders/7", "B", bl.Token); err != nil || !ok {
		t.Fatalf("B's release = %v, %v", ok, err)
	}
	if _, err := b.Renew(ctx(t), "/orders/7", "A", a.Token, long); !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("A's renew after B released = %v; want ErrLost", err)
	}
	if n := issued(t, b, "/orders/7"); n != bl.Token {
		t.Errorf("Issued = %d; want B's %d", n, bl.Token)
	}
}

// Seed test 4: an acquisition aborted after its token was drawn grants
// nothing, and the next acquisition gets a larger token.
func testSeed4(t *testing.T, h Harness) {
	b := h.New(t)
	prev, _ := mustAcquire(t, b, "/orders/other", "C", long)
	drawn := h.FailAfterDraw(t, b)
	_, _, err := b.Acquire(ctx(t), "/orders/7", "A", long)
	if err == nil || errors.Is(err, coordinator.ErrHeld) {
		t.Fatalf("Acquire with the injected failure = %v; want a store error", err)
	}
	gap := drawn()
	if gap <= prev.Token {
		t.Fatalf("the aborted acquisition drew %d; want above %d", gap, prev.Token)
	}
	cur, err := b.Lease(ctx(t), "/orders/7")
	if err != nil || cur.Token != 0 || cur.Held() {
		t.Errorf("record after the aborted acquisition = %+v, %v; want none", cur, err)
	}
	if n := issued(t, b, "/orders/7"); n != 0 {
		t.Errorf("Issued after the aborted acquisition = %d; want 0", n)
	}
	if _, err := b.Renew(ctx(t), "/orders/7", "A", gap, long); !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("renew with the gap token = %v; want ErrLost", err)
	}
	if ok, err := b.Release(ctx(t), "/orders/7", "A", gap); err != nil || ok {
		t.Errorf("release with the gap token = %v, %v; want false", ok, err)
	}
	bl, fresh := mustAcquire(t, b, "/orders/7", "B", long)
	if !fresh || bl.Token <= gap {
		t.Errorf("next acquisition token %d; want above the gap %d", bl.Token, gap)
	}
	if _, err := b.Renew(ctx(t), "/orders/7", "A", gap, long); !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("renew with the gap token after B acquired = %v; want ErrLost", err)
	}
}

func testReopen(t *testing.T, h Harness) {
	b := h.New(t)
	var before int64
	for _, r := range []string{"a", "b", "c"} {
		l, _ := mustAcquire(t, b, r, "A", long)
		before = max(before, l.Token)
	}
	b = h.Reopen(t, b)
	cur, err := b.Lease(ctx(t), "a")
	if err != nil || cur.Owner != "A" || !cur.Held() {
		t.Errorf("lease after restart = %+v, %v; want A's live lease", cur, err)
	}
	for _, r := range []string{"new1", "new2"} {
		l, _ := mustAcquire(t, b, r, "B", long)
		if l.Token <= before {
			t.Errorf("token after restart %d; want above %d issued before", l.Token, before)
		}
	}
}

func newService(b coordinator.Backend) *coordinator.Service {
	s := &coordinator.Service{Backend: b, MaxWait: time.Minute}
	s.Start()
	return s
}

func testServiceWait(t *testing.T, h Harness) {
	b := h.New(t)
	s := newService(b)
	defer s.Close()
	a, err := s.Acquire(ctx(t), coordinator.AcquireRequest{Resource: "r", Owner: "A", TTL: coordinator.Duration(long)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx(t), coordinator.AcquireRequest{Resource: "r", Owner: "B", TTL: coordinator.Duration(long)})
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeLeaseHeld || fe.Owner != "A" || fe.ExpiresAt == nil {
		t.Fatalf("Acquire without wait = %v; want lease_held naming A and its expiry", err)
	}
	got := make(chan error, 1)
	var bl coordinator.Lease
	go func() {
		var err error
		// The wait (20s) is far below A's lease (1m): only the release can
		// end it with the lease in time.
		bl, err = s.Acquire(ctx(t), coordinator.AcquireRequest{Resource: "r", Owner: "B", TTL: coordinator.Duration(long), Wait: coordinator.Duration(20 * time.Second)})
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let B start waiting (not needed for correctness)
	if ok, err := s.Release(ctx(t), coordinator.RenewRequest{Resource: "r", Owner: "A", Token: a.Token}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Acquire = %v; want the lease after A's release", err)
	}
	if bl.Owner != "B" || bl.Token <= a.Token {
		t.Errorf("waiter got %+v; want B with a token above %d", bl, a.Token)
	}
}

// testConcurrent: many acquirers over many rounds, each waiting for the
// lease, holding it briefly and releasing it. Never two live holders,
// tokens strictly increasing in the order the lease was held, and no lost
// wake-up: a waiter that missed a release would sleep until its wait ran
// out (the lease's ttl is far longer) and fail with lease_held.
func testConcurrent(t *testing.T, h Harness) {
	b := h.New(t)
	s := newService(b)
	defer s.Close()
	const workers, rounds = 8, 12
	var (
		holders atomic.Int32
		mu      sync.Mutex
		last    int64
		grants  int
	)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := string(rune('A' + w))
			for range rounds {
				l, err := s.Acquire(ctx(t), coordinator.AcquireRequest{Resource: "hot", Owner: owner,
					TTL: coordinator.Duration(long), Wait: coordinator.Duration(20 * time.Second)})
				if err != nil {
					errs <- err
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d live holders at once (%s holds token %d)", n, owner, l.Token)
				}
				mu.Lock()
				if l.Token <= last {
					t.Errorf("token %d granted after %d", l.Token, last)
				}
				last = l.Token
				grants++
				mu.Unlock()
				holders.Add(-1)
				if ok, err := s.Release(ctx(t), coordinator.RenewRequest{Resource: "hot", Owner: owner, Token: l.Token}); err != nil || !ok {
					errs <- errors.Join(errors.New("release failed"), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("acquirer failed (a lost wake-up ends in lease_held): %v", err)
	}
	if grants != workers*rounds {
		t.Errorf("%d grants; want %d", grants, workers*rounds)
	}
}
