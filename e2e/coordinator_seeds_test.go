package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/testenv"
)

// seedStore is one object store's side of the stale-owner tests that run
// against the coordinator (docs/design.md §8): a write through the gateway
// carrying a token, the check that a write was refused as stale, and the
// durable state read from the store itself, never through the gateway.
type seedStore struct {
	put    func(t *testing.T, token int64, object, body string) error
	stale  func(t *testing.T, what string, err error)
	stored func(t *testing.T, object string) (body, stamp string)
}

// coordLink is a worker's own TCP link to the coordinator, through
// toxiproxy, so that a test can cut it or drop the coordinator's answers
// while the worker's link to the gateway (not proxied) stays up.
type coordLink struct {
	proxy *testenv.Proxy
	URL   string // the coordinator's base URL as seen through the link
}

func newCoordLink(t *testing.T, tp *testenv.ToxiproxyServer, name, coord string) *coordLink {
	t.Helper()
	px := tp.Proxy(t, name, strings.TrimPrefix(coord, "http://"))
	return &coordLink{proxy: px, URL: "http://" + px.Listen}
}

// showLease reads the coordinator's record of resource over the test's
// own (never cut) link.
func showLease(t *testing.T, coord, resource string) coordinator.LeaseResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := (&client.Client{URL: coord, Owner: "test"}).Show(ctx, resource)
	if err != nil {
		t.Fatalf("show %s: %v", resource, err)
	}
	return l
}

// acquireWaiting takes a one-minute lease, waiting (bounded) for the
// current holder's lease to lapse, and returns its token.
func acquireWaiting(t *testing.T, coord, resource, owner string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := (&client.Client{URL: coord, Owner: owner}).AcquireOnce(ctx, resource, client.Options{TTL: time.Minute, Wait: 15 * time.Second})
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", resource, owner, err)
	}
	return l.Token
}

// seedAbortedAcquisition is stale-owner test 4: an acquisition aborted
// after its token was drawn grants no authority. X's acquire reaches the
// coordinator, which draws a token and records X's lease, but the answer
// never comes back (toxiproxy drops it) and X gives up: X never learns the
// token, never renews nor uses it. The coordinator's record proves the
// token was drawn. Once that lease lapses B acquires a newer token, B's
// write lands, and a write or a renewal carrying the drawn token is
// refused; the store keeps B's write stamped with B's token.
func seedAbortedAcquisition(t *testing.T, tp *testenv.ToxiproxyServer, coord, resource, object string, s seedStore) {
	t.Helper()
	a := acquire(t, coord, resource, "A")
	if err := s.put(t, a, object, "A"); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	release(t, coord, resource, "A", a)

	link := newCoordLink(t, tp, "coordinator-aborted", coord)
	link.proxy.AddTimeout(t, 0) // answers to X are dropped; its requests pass
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := (&client.Client{URL: link.URL, Owner: "X"}).AcquireOnce(ctx, resource, client.Options{TTL: time.Second})
	cancel()
	if err == nil {
		t.Fatal("X's acquisition was answered through a link that drops answers")
	}
	var gap int64
	waitFor(t, func() bool {
		l := showLease(t, coord, resource)
		gap = l.Token
		return l.Owner == "X"
	})
	if gap <= a {
		t.Fatalf("the aborted acquisition drew %d; want above A's %d", gap, a)
	}

	b := acquireWaiting(t, coord, resource, "B")
	if b <= gap {
		t.Fatalf("B's token %d; want above the aborted acquisition's %d", b, gap)
	}
	s.stale(t, "the drawn token once B holds the lease", s.put(t, gap, object, "X"))
	if err := s.put(t, b, object, "B"); err != nil {
		t.Fatalf("B's write after the aborted acquisition: %v", err)
	}
	s.stale(t, "the drawn token after B's write", s.put(t, gap, object, "X-late"))
	st, body := call(t, "POST", coord+"/v1/leases/renew", fmt.Sprintf(`{"resource":%q,"owner":"X","token":%d,"ttl":"1m"}`, resource, gap), jsonCT)
	if st != http.StatusConflict || !strings.Contains(body, "lease_lost") {
		t.Fatalf("renew with the drawn token: %d %s; want 409 lease_lost", st, body)
	}
	if got, stamp := s.stored(t, object); got != "B" || stamp != fmt.Sprint(b) {
		t.Fatalf("stored %q stamp %q; want B stamped %d", got, stamp, b)
	}
}

// seedCutOff is stale-owner test 8: worker A is cut off from the
// coordinator while its link to the gateway stays up. A holds its lease
// with the client library, which renews it over A's own link; the lease
// outlives its TTL while the link is up, then the link is cut (toxiproxy
// disabled: connections closed, new ones refused), A's renewals fail and
// its lease ends with ErrExpired. B acquires once the coordinator lets the
// lease lapse; A's late write through the still reachable gateway is
// refused, before and after B's write, and the store holds A's version
// until B's replaces it.
func seedCutOff(t *testing.T, tp *testenv.ToxiproxyServer, coord, resource, object string, s seedStore) {
	t.Helper()
	const ttl = 2 * time.Second
	link := newCoordLink(t, tp, "coordinator-cut", coord)
	la, err := (&client.Client{URL: link.URL, Owner: "A"}).Acquire(context.Background(), resource, client.Options{TTL: ttl})
	if err != nil {
		t.Fatalf("A's acquisition: %v", err)
	}
	defer la.Close()
	a := la.Token
	if err := s.put(t, a, object, "A"); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	// Renewals over A's link keep the lease past its TTL.
	time.Sleep(ttl + ttl/2)
	if err := la.Err(); err != nil {
		t.Fatalf("A's lease ended while its link was up: %v", err)
	}
	if l := showLease(t, coord, resource); !l.Held || l.Owner != "A" || l.Token != a {
		t.Fatalf("lease after A's renewals: %+v; want held by A with %d", l, a)
	}

	link.proxy.SetEnabled(t, false)
	select {
	case <-la.Done():
	case <-time.After(4 * ttl):
		t.Fatal("A's lease still held long after its link to the coordinator was cut")
	}
	if err := la.Err(); !errors.Is(err, client.ErrExpired) {
		t.Fatalf("A's lease ended with %v; want ErrExpired (renewals cut off)", err)
	}

	b := acquireWaiting(t, coord, resource, "B")
	if b <= a {
		t.Fatalf("B's token %d; want above A's %d", b, a)
	}
	s.stale(t, "A after its lease lapsed", s.put(t, a, object, "A-late"))
	if got, stamp := s.stored(t, object); got != "A" || stamp != fmt.Sprint(a) {
		t.Fatalf("stored %q stamp %q; want A's version untouched until B writes", got, stamp)
	}
	if err := s.put(t, b, object, "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	s.stale(t, "A after B's write", s.put(t, a, object, "A-later"))
	if got, stamp := s.stored(t, object); got != "B" || stamp != fmt.Sprint(b) {
		t.Fatalf("stored %q stamp %q; want B stamped %d", got, stamp, b)
	}
}
