package e2e

// Shared mode after the database comes back (docs/design.md §4, "A replica
// that comes back"): a PostgreSQL restart (immediate stop, start) and a
// failover to a synchronous standby cost the writes of resources with
// nothing in flight the replicas' reconnection, not the forward timeout;
// a write in flight on a replica that died with the database is still
// waited out (I2), checked on the upstream's record with Porcupine.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// sharedRecoveryTimeout is the replicas' route timeout: a drain waits up
// to its forward bound (11s) for a marker session found gone.
const sharedRecoveryTimeout = 10 * time.Second

// sharedFirstWrites is how many writes are timed after the database
// returns.
const sharedFirstWrites = 200

// sharedSeed writes every /orders/k-<i> with token 1 through alternating
// replicas, so that the writes after the return are advances: each drains,
// which is what found the lost marker sessions and waited for them.
func sharedSeed(t *testing.T, r []*Proc) {
	for i := range sharedFirstWrites {
		if code, body := write(t, "PUT", fmt.Sprintf("%s/orders/k-%d", r[i%2].URL("gateway"), i), "1", "v1"); code != 200 {
			t.Fatalf("seed write %d: %d %s", i, code, body)
		}
	}
}

// sharedHandOver: A's slow write (token 1) through replica 0, then B's
// (token 2) through replica 1, which drains A's before it is forwarded.
func sharedHandOver(t *testing.T, up *sharedUpstream, r []*Proc, key string) {
	arrived := make(chan struct{}, 1)
	up.hold = func(req *http.Request) {
		if req.URL.Path == key && req.Header.Get("Fencing-Token") == "1" {
			arrived <- struct{}{}
			time.Sleep(time.Second)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		write(t, "PUT", r[0].URL("gateway")+key, "1", "A")
	}()
	<-arrived
	if code, body := write(t, "PUT", r[1].URL("gateway")+key, "2", "B"); code != 200 {
		t.Fatalf("B's hand-over write: %d %s", code, body)
	}
	<-done
	if got := tokensApplied(up.rec, key); got != "1,2" {
		t.Fatalf("hand-over applied %q; want 1,2", got)
	}
}

// sharedTimeFirstWrites sends the first writes after the database returned
// at back (16 at a time, through alternating replicas: token 2 on every
// seeded resource, B's token on the hand-over key first) and checks each
// was served within 2s of back. It logs p50/p99 of their latency.
func sharedTimeFirstWrites(t *testing.T, r []*Proc, back time.Time, handOver string) {
	if code, body, err := writeWithin(r[1].URL("gateway")+handOver, "2", "B again", back); code != 200 || time.Since(back) > 2*time.Second {
		t.Fatalf("B's write after the database returned: %d %s %v, %v after it accepted connections; want 200 within 2s", code, body, err, time.Since(back))
	}
	lat := make([]time.Duration, sharedFirstWrites)
	since := make([]time.Duration, sharedFirstWrites)
	errs := make(chan string, sharedFirstWrites)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				code, body, err := writeWithin(fmt.Sprintf("%s/orders/k-%d", r[i%2].URL("gateway"), i), "2", "v2", back)
				lat[i], since[i] = time.Since(start), time.Since(back)
				if err != nil || code != 200 {
					errs <- fmt.Sprintf("k-%d: %d %s %v", i, code, body, err)
				}
			}
		})
	}
	for i := range sharedFirstWrites {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a write after the database returned: %s", e)
	}
	last := slicesMax(since)
	t.Logf("first %d writes after the database accepted connections: latency p50 %v, p99 %v; the last answered %v after it",
		sharedFirstWrites, percentile(lat, 50).Round(time.Millisecond), percentile(lat, 99).Round(time.Millisecond), last.Round(time.Millisecond))
	if p99 := percentile(lat, 99); p99 > 2*time.Second {
		t.Fatalf("p99 of the first writes %v; want within 2s", p99)
	}
}

// writeWithin writes, retrying a 503 (whose Retry-After the replica
// sets while its marker session reconnects) until 2s after back; it
// returns the last answer.
func writeWithin(url, token, body string, back time.Time) (int, string, error) {
	for {
		code, b, err := tryWriteTimeout(url, token, body, 30*time.Second)
		if (err == nil && code != 503) || time.Since(back) > 2*time.Second {
			return code, b, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// TestSharedRecoveryAfterRestart: two replicas, a hand-over on one
// resource, PostgreSQL stopped as -m immediate does (a write meanwhile is
// refused 503) and started: B's write and 200 advances on resources with
// nothing in flight are served within 2s. Before, the drains waited each
// lost marker session's forward timeout (fence_draining).
func TestSharedRecoveryAfterRestart(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, sharedYAMLTimeout("shared", pg.URL, up.url, false, sharedRecoveryTimeout))
	sharedSeed(t, r)
	sharedHandOver(t, up, r, "/orders/h")

	pg.Crash(t)
	if code, body := write(t, "PUT", r[1].URL("gateway")+"/orders/h", "2", "down"); code != 503 {
		t.Fatalf("a write with the database down: %d %s; want 503", code, body)
	}
	pg.Start(t)
	sharedTimeFirstWrites(t, r, time.Now(), "/orders/h")
	sharedCheckHistory(t, up.rec.History())
}

// TestSharedRecoveryAfterSyncFailover: the same after the primary is
// killed and its synchronous standby promoted (the replicas follow through
// a multi-host URL, without a restart).
func TestSharedRecoveryAfterSyncFailover(t *testing.T) {
	primary := testenv.PostgresIsolated(t)
	tp := testenv.Toxiproxy(t)
	wal := tp.Proxy(t, "wal", primary.Addr(t))
	standby := primary.Standby(t, wal.Listen)
	primary.Exec(t, "ALTER SYSTEM SET synchronous_standby_names = '*'")
	primary.Exec(t, "SELECT pg_reload_conf()")
	url := fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write",
		primary.Addr(t), standby.Addr(t), primary.Database)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, sharedYAMLTimeout("shared", url, up.url, false, sharedRecoveryTimeout))
	waitFor(t, func() bool { return metaValue(t, standby, "replication") == "1 sync" })
	sharedSeed(t, r)
	sharedHandOver(t, up, r, "/orders/h")

	wal.SetEnabled(t, false)
	primary.Crash(t)
	standby.Promote(t)
	sharedTimeFirstWrites(t, r, time.Now(), "/orders/h")
	for _, p := range r {
		if strings.Contains(p.Log(), "fence store went back") {
			t.Fatalf("a replica refused the synchronous standby:\n%s", p.Log())
		}
	}
	sharedCheckHistory(t, up.rec.History())
}

// TestSharedRecoveryReplicaDiedWithDatabase: replica 0 has a slow write
// (token 1) in flight when PostgreSQL crashes, and is killed with it (a
// node lost). The upstream still applies that write 3s later. After the
// database returns, B's token 2 through replica 1 waits for replica 0's
// lost session (its forward bound), and lands after it; writes of other
// resources are not held. The upstream's record, each applied write an
// operation at the instant it landed, and the refusals the clients saw,
// is checked with Porcupine against a fenced register.
func TestSharedRecoveryReplicaDiedWithDatabase(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, sharedYAMLTimeout("shared", pg.URL, up.url, false, sharedRecoveryTimeout))
	h := newHistory()
	const key = "/orders/died"
	arrived := make(chan struct{}, 1)
	up.hold = func(req *http.Request) {
		if req.URL.Path == key && req.Header.Get("Fencing-Token") == "1" {
			arrived <- struct{}{}
			time.Sleep(3 * time.Second)
		}
	}
	callA := h.now()
	go tryWrite(r[0].URL("gateway")+key, "1", "A")
	<-arrived
	pg.Crash(t)
	r[0].Kill9()
	h.add(1, callA, fencedInput{kind: opWrite, key: key, token: 1, owner: "A"}, outUnknown)
	pg.Start(t)
	back := time.Now()

	if code, body, err := writeWithin(r[1].URL("gateway")+"/orders/other", "1", "o", back); code != 200 || time.Since(back) > 2*time.Second {
		t.Fatalf("a write of another resource after the database returned: %d %s %v, %v after it; want 200 within 2s", code, body, err, time.Since(back))
	}
	// While B waits, replica 1 says why.
	sawRecovering := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			if code, body := call(t, "GET", r[1].URL("admin")+"/readyz", ""); code == 200 && strings.Contains(body, "recovering until") && strings.Contains(body, "marker session was lost") {
				sawRecovering <- true
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		sawRecovering <- false
	}()
	for i := range 3 {
		call := h.now()
		code, body, err := tryWriteTimeout(r[1].URL("gateway")+key, "2", fmt.Sprintf("B%d", i), 30*time.Second)
		h.add(2, call, fencedInput{kind: opWrite, key: key, token: 2, owner: "B"}, writeOutcome(code, body, err))
		if code == 200 {
			break
		}
		if code != 503 || !strings.Contains(body, "fence_draining") {
			t.Fatalf("B's write: %d %s %v; want 200, or 503 fence_draining while replica 0's session is waited out", code, body, err)
		}
	}
	t.Logf("B was served %v after the database returned (replica 0's forward bound: 11s)", time.Since(back).Round(time.Millisecond))
	if !<-sawRecovering {
		t.Fatal("replica 1's /readyz never said it was recovering while B waited")
	}
	if m := scrape(t, r[1].URL("admin")); m["fencegate_recovery_wait_seconds_count"] < 1 {
		t.Fatalf("fencegate_recovery_wait_seconds_count = %v on replica 1; want B's wait counted", m["fencegate_recovery_wait_seconds_count"])
	}
	call := h.now()
	code, body, err := tryWrite(r[1].URL("gateway")+key, "1", "A zombie")
	h.add(3, call, fencedInput{kind: opWrite, key: key, token: 1, owner: "A"}, writeOutcome(code, body, err))
	if code != 409 {
		t.Fatalf("token 1 after token 2: %d %s; want 409", code, body)
	}

	// The upstream's record: every applied write is an operation at the
	// instant it landed (outcome ok), which is the order I2 is about.
	for _, a := range up.rec.HistoryOf(key) {
		at := int64(a.At.Sub(h.start))
		owner := map[string]string{"1": "A", "2": "B"}[a.Token]
		var tok int64
		fmt.Sscan(a.Token, &tok)
		h.mu.Lock()
		h.ops = append(h.ops, porcupine.Operation{ClientId: 10, Input: fencedInput{kind: opWrite, key: key + "@upstream", token: tok, owner: owner}, Call: at, Output: outOK, Return: at})
		h.mu.Unlock()
	}
	if got := tokensApplied(up.rec, key); got != "1,2" {
		t.Fatalf("upstream applied %q to %s; want 1,2 (the dead replica's write first)\n%s", got, key, recorder.Summary(up.rec.History()))
	}
	h.checkLinearizable(t)
}
