package postgres

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
)

// historyUpstream is an HTTP upstream that records, in the order it
// finished them, the token of every write it applied.
type historyUpstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []int64
}

func newHistoryUpstream(t *testing.T) *historyUpstream {
	h := &historyUpstream{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
			time.Sleep(d)
		}
		tok, _ := strconv.ParseInt(r.Header.Get("Fencing-Token"), 10, 64)
		h.mu.Lock()
		h.log = append(h.log, tok)
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// write admits a write of token on f and forwards it (the permit held
// until the upstream answered); it returns how long the admission took.
func (h *historyUpstream) write(t *testing.T, f *SharedFence, resource string, token int64, delay time.Duration) (time.Duration, error) {
	start := time.Now()
	p, err := f.Admit(context.Background(), gateway.Write{Resource: resource, Token: token})
	waited := time.Since(start)
	if err != nil {
		return waited, err
	}
	defer p.Release()
	req, _ := http.NewRequest("PUT", h.srv.URL+"?delay="+delay.String(), strings.NewReader("v"))
	req.Header.Set("Fencing-Token", strconv.FormatInt(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return waited, nil
}

func (h *historyUpstream) history() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.log...)
}

// sharedMarkers counts the SHARED advisory locks on key granted to
// marker sessions.
func sharedMarkers(t *testing.T, st *Store, key int64) int {
	t.Helper()
	var n int
	err := st.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND mode = 'ShareLock' AND objsubid = 1
   AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSharedFenceStickyMarkerReleasedForDrain: replica A keeps its marker
// of a hot resource between writes (a repeated token then costs its read
// alone), and lets it go at once when replica B's newer token drains the
// resource, whether the marker is idle or still has a write in flight. The
// idle period is set to a minute, so only the drain's notification can let
// B through in time; the upstream's history shows every write of A's token
// before B's.
func TestSharedFenceStickyMarkerReleasedForDrain(t *testing.T) {
	pg := testenv.Postgres(t)
	st := openFenceStore(t, pg.URL, Options{MaxConns: 16})
	a := newShared(t, st, SharedFenceOptions{markerIdle: time.Minute, Replica: "A"})
	b := newShared(t, openFenceStore(t, pg.URL, Options{MaxConns: 16}), SharedFenceOptions{markerIdle: time.Minute, Replica: "B"})
	for _, f := range []*SharedFence{a, b} {
		waitFor(t, func() bool { return f.listenGen.Load()%2 == 1 })
	}
	up := newHistoryUpstream(t)
	const res = "/sticky"
	key := lockKey(res)
	const quick = 2 * time.Second // far below both the idle period and the drain timeout

	// Idle: A's writes are done; its marker stays, and repeated writes
	// cost one statement each.
	if _, err := up.write(t, a, res, 1, 0); err != nil {
		t.Fatal(err)
	}
	const n = 20
	before := a.MarkerStatements()
	for range n {
		if _, err := up.write(t, a, res, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.MarkerStatements() - before; got > n+1 {
		t.Fatalf("%d repeated writes under a kept marker cost %d marker statements; want at most %d (the read alone, and a heartbeat)", n, got, n+1)
	}
	if got := sharedMarkers(t, st, key); got != 1 {
		t.Fatalf("after A's writes: %d shared markers on the key; want 1 (kept idle)", got)
	}
	waited, err := up.write(t, b, res, 2, 0)
	if err != nil {
		t.Fatalf("B token 2 after A's idle marker: %v", err)
	}
	t.Logf("B token 2 waited %v for A's idle marker", waited)
	if waited > quick {
		t.Fatalf("B token 2 waited %v for A's idle marker; want it let go at once (< %v)", waited, quick)
	}

	// Busy: A's write of token 3 is in flight when B's token 4 drains; A
	// keeps no marker after it, and B goes through once it ended.
	if _, err := up.write(t, a, res, 3, 0); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	aDone := make(chan time.Time, 1)
	go func() {
		p, err := a.Admit(context.Background(), gateway.Write{Resource: res, Token: 3})
		if err != nil {
			close(started)
			aDone <- time.Time{}
			return
		}
		close(started)
		req, _ := http.NewRequest("PUT", up.srv.URL+"?delay=300ms", strings.NewReader("v"))
		req.Header.Set("Fencing-Token", "3")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		p.Release()
		aDone <- time.Now()
	}()
	<-started
	waited, err = up.write(t, b, res, 4, 0)
	if err != nil {
		t.Fatalf("B token 4 after A's busy marker: %v", err)
	}
	released := <-aDone
	if released.IsZero() {
		t.Fatal("A's token 3 write was not admitted")
	}
	t.Logf("B token 4 waited %v for A's write in flight (300ms upstream)", waited)
	if waited > 300*time.Millisecond+quick {
		t.Fatalf("B token 4 waited %v; want it through shortly after A's write ended", waited)
	}
	if got := sharedMarkers(t, st, key); got > 0 {
		// B's marker may be idle on the key by now: it is B's, not A's.
		var onA int
		if err := st.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN fence_session s ON s.backend_pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ShareLock' AND l.objsubid = 1
   AND ((l.classid::bigint << 32) | l.objid::bigint) = $1 AND s.replica = $2 AND s.dead_at IS NULL`, key, a.replica).Scan(&onA); err != nil {
			t.Fatal(err)
		}
		if onA != 0 {
			t.Fatalf("A still holds %d markers on the key after B's drain", onA)
		}
	}

	h := up.history()
	for i := 1; i < len(h); i++ {
		if h[i] < h[i-1] {
			t.Fatalf("upstream history %v: token %d landed after %d", h, h[i], h[i-1])
		}
	}
	want := fmt.Sprint(append(slices.Repeat([]int64{1}, n+1), 2, 3, 3, 4))
	if got := fmt.Sprint(h); got != want {
		t.Fatalf("upstream history %s; want %s", got, want)
	}
}
