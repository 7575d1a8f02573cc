package e2e

import (
	"testing"
	"time"
)

// A gateway killed with a write in flight: the upstream still applies it
// after the process is gone. The restarted gateway has no record of it, so
// a newer token's write must not reach the upstream until the route's
// timeout has passed, or the older write lands last (I1). After a clean
// stop (every admitted write ended) a restart waits for nothing. Checked
// on the upstream's history.
func TestRestartAfterCrashWaitsOutWritesInFlight(t *testing.T) {
	up := newSlowUpstream(t)
	p := startFencegate(t, ordersGateway(up.url, "3s")+`store:
  embedded: {path: $DIR/fencegate.db}
admin: {listen: $ADMIN}
`)
	key := "/orders/crash"
	go tryWrite(p.URL("gateway")+key, "1", "A")
	up.waitArrived(t, key)
	p.Kill9()
	p.Restart()
	start := time.Now()
	if code, body := write(t, "PUT", p.URL("gateway")+key, "2", "B"); code != 200 {
		t.Fatalf("B after the restart: %d %s", code, body)
	}
	if got := tokensApplied(up.rec, key); got != "1,2" {
		t.Fatalf("upstream applied tokens %q; want 1,2 (B waited %v)", got, time.Since(start).Round(time.Millisecond))
	}
	waitLog(t, p, "stopped with writes possibly in flight")

	// A fence that did not move in the window before the crash, written
	// again with its token: admitted at once.
	p.Stop()
	p.Restart()
	start = time.Now()
	// At once: it did not wait for a recovery (the fence's count), and
	// took far less than the route's 3s such a wait would last (the bound
	// leaves the rest to a loaded machine).
	if code, body := write(t, "PUT", p.URL("gateway")+key, "2", "B again"); code != 200 || time.Since(start) > 2*time.Second {
		t.Fatalf("B after a clean stop: %d %s in %v; want 200 at once", code, body, time.Since(start))
	}
	wantNoRecoveryWait(t, p.URL("admin"), "B after a clean stop")
}
