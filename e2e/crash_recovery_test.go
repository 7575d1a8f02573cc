package e2e

// kill -9 of a gateway on a local fence, on both stores: the restart
// waits out only what a write the dead process left in flight could be
// overtaken by (docs/design.md "After a crash (local fence)"), checked on
// the upstream's record of the order in which writes landed.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// crashSlow is how long the upstream takes to apply a write whose body is
// "slow": shorter than the orders route's timeout (3s), so it lands after
// the restart, while the process that sent it is long dead.
const crashSlow = 2500 * time.Millisecond

// crashYAML: two routes, orders (timeout 3s) and uploads (timeout 30s,
// the longest), over store.
func crashYAML(upstream, store string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 3s}
      resource: "{path}"
    - name: uploads
      match: {path_prefix: /uploads/}
      upstream: {url: %q, timeout: 30s}
      resource: "{path}"
admin: {listen: $ADMIN}
log: {level: info}
`, upstream, upstream) + store
}

func crashStores() []storeCase {
	return []storeCase{
		{"embedded", func(t *testing.T) (string, string) { return "store:\n  embedded: {path: $DIR/fencegate.db}\n", "" }},
		{"postgres-local", func(t *testing.T) (string, string) {
			url := testenv.Postgres(t).URL
			return fmt.Sprintf("store:\n  postgres: {url: %q, timeout: 2s}\nfence: {mode: local}\n", url), url
		}},
	}
}

// timedWrite writes and returns the status and how long it took.
func timedWrite(t *testing.T, url, token, body string) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	code, b := write(t, "PUT", url, token, body)
	return code, b, time.Since(start)
}

// percentile of ds (sorted in place), p in 0..100.
func percentile(ds []time.Duration, p int) time.Duration {
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	return ds[max(0, min(len(ds)-1, i-1))]
}

func TestCrashRecoveryLocalFence(t *testing.T) {
	for _, sc := range crashStores() {
		t.Run(sc.name, func(t *testing.T) {
			arrived := make(chan string, 4)
			rec := &recorder.Recorder{Delay: func(r *http.Request) {
				if r.Header.Get("X-Slow") != "" {
					arrived <- r.URL.Path
					time.Sleep(crashSlow)
				}
			}}
			srv := httptest.NewServer(rec)
			t.Cleanup(srv.Close)
			store, _ := sc.store(t)
			p := startFencegate(t, crashYAML(srv.URL, store))
			gw, admin := p.URL("gateway"), p.URL("admin")

			// 1. Nothing in flight for the last second: no write waits after
			// the kill, a new resource and an advance alike.
			const n = 50
			for i := range n {
				if code, body := write(t, "PUT", fmt.Sprintf("%s/orders/adv-%d", gw, i), "1", "a"); code != 200 {
					t.Fatalf("write before the kill: %d %s", code, body)
				}
			}
			time.Sleep(1200 * time.Millisecond)
			p.Kill9()
			p.Restart()
			var first []time.Duration
			for i := range n {
				for _, w := range []struct{ key, token string }{{fmt.Sprintf("/orders/new-%d", i), "1"}, {fmt.Sprintf("/orders/adv-%d", i), "2"}} {
					code, body, d := timedWrite(t, gw+w.key, w.token, "b")
					if code != 200 {
						t.Fatalf("%s@%s after a quiet kill: %d %s", w.key, w.token, code, body)
					}
					first = append(first, d)
				}
			}
			p50, p99 := percentile(first, 50), percentile(first, 99)
			t.Logf("quiet kill -9: first %d writes after the restart (new resources and advances): p50 %v, p99 %v (issue 42's figure: p99 under 100ms)", len(first), p50, p99)
			// That no write waited is the fence's own count, exact under
			// any load. The latency bound only catches a wait the count
			// missed: such a wait lasts the orders route's bound (4s),
			// while the machine alone (-race, CI's packages in parallel on
			// 2 cores) took p99 150ms, past the 100ms of an idle one.
			wantNoRecoveryWait(t, admin, "quiet kill -9")
			if p99 > time.Second {
				t.Fatalf("quiet kill -9: p99 of the first writes %v; want under 1s (a recovery wait lasts 4s)", p99)
			}

			// 2. A write in flight at the kill (token 1 on /orders/x, landing
			// 2.5s later): its own token and resources without a fence go at
			// once; token 2 waits for the orders route's bound (4s), not the
			// uploads route's (31s), and lands after it.
			key := "/orders/x"
			go func() {
				req, _ := http.NewRequest("PUT", gw+key, strings.NewReader("A-slow"))
				req.Header.Set("Fencing-Token", "1")
				req.Header.Set("X-Slow", "1")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("the slow write never reached the upstream")
			}
			p.Kill9()
			restart := time.Now()
			p.Restart()
			// At once: neither waits for the recovery (the fence's count),
			// and neither took anywhere near the 4s such a wait lasts.
			if code, body, d := timedWrite(t, gw+"/orders/fresh", "1", "f"); code != 200 || d > 2*time.Second {
				t.Fatalf("a resource without a fence after the kill: %d %s in %v; want 200 at once", code, body, d)
			}
			if code, body, d := timedWrite(t, gw+key, "1", "A-again"); code != 200 || d > 2*time.Second {
				t.Fatalf("the token in flight, again: %d %s in %v; want 200 at once", code, body, d)
			}
			wantNoRecoveryWait(t, admin, "a new resource and the token in flight after a kill -9")
			if code, body := call(t, "GET", admin+"/readyz", ""); code != 200 || !strings.Contains(body, "recovering until") || !strings.Contains(body, "crash") {
				t.Fatalf("/readyz while recovering: %d %q; want 200 naming the recovery and its reason", code, body)
			}
			code, body, _ := timedWrite(t, gw+key, "2", "B")
			waited := time.Since(restart)
			if code != 200 {
				t.Fatalf("B after the kill: %d %s", code, body)
			}
			// Until the dead process's write has landed (or could have).
			for deadline := time.Now().Add(2 * crashSlow); len(rec.HistoryOf(key)) < 3 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if got := tokensApplied(rec, key); got != "1,1,2" {
				t.Fatalf("upstream applied tokens %q to %s; want 1,1,2 (B waited %v)", got, key, waited.Round(time.Millisecond))
			}
			if waited > 10*time.Second {
				t.Fatalf("B waited %v; want at most the orders route's bound (4s), not the longest route's", waited)
			}
			t.Logf("kill -9 with a write in flight: the advance waited %v after the restart", waited.Round(time.Millisecond))
			if m := scrape(t, admin); m["fencegate_recovery_wait_seconds_count"] < 1 {
				t.Fatalf("fencegate_recovery_wait_seconds_count = %v; want the wait counted", m["fencegate_recovery_wait_seconds_count"])
			}
			// The recovery ends at the longest bound (31s): not waited for
			// here; the log says when it started.
			waitLog(t, p, "stopped with writes possibly in flight")
		})
	}
}

// wantNoRecoveryWait fails if a write through the process at admin waited
// for a recovery (fencegate_recovery_wait_seconds counts every such wait).
func wantNoRecoveryWait(t *testing.T, admin, what string) {
	t.Helper()
	if n := scrape(t, admin)["fencegate_recovery_wait_seconds_count"]; n != 0 {
		t.Fatalf("%s: %v writes waited for the recovery; want none", what, n)
	}
}
