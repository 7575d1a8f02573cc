package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/testenv"
)

const drainYAML = `
gateway:
  listen: 127.0.0.1:0
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: $UPSTREAM}
      resource: "{path}"
store:
  postgres: {url: "%s"}
fence: {mode: shared}
coordinator:
  enabled: true
  listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
  auth:
    api_keys:
      - {owner: ops, sha256: "%s"}
`

// TestConsoleAwaitingFirstWrite: in fence mode shared a lease raises the
// fence when it is issued; with an older write in flight the fence is
// drained by the first write with the new token, after the older ones
// ended. The console reads "draining", in red, only while an older write is
// in flight, and "awaiting first write" (no alarm) once none is, until the
// new holder writes; the lease's holder is on the row. Followed through one
// fence: worker-a's write in flight when worker-b's lease is issued →
// draining; that write answered → awaiting first write; worker-b's write →
// drained.
func TestConsoleAwaitingFirstWrite(t *testing.T) {
	pg := testenv.Postgres(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(up.Close)
	s, _ := startEdge(t, fmt.Sprintf(drainYAML, pg.URL, auth.HashKey(consoleKey)), up.URL)
	admin, gw, coord := "http://"+s.Addr("admin"), "http://"+s.Addr("gateway"), "http://"+s.Addr("coordinator")
	c := &http.Client{}
	jsonH := map[string]string{"Content-Type": "application/json"}
	acquire := func(res, owner string) int64 { return acquireLease(t, coord, res, owner) }
	put := func(res string, token int64, h map[string]string) answer {
		hh := map[string]string{"Fencing-Token": fmt.Sprint(token)}
		for k, v := range h {
			hh[k] = v
		}
		return do(t, c, "PUT", gw+res, strings.NewReader("x"), hh)
	}

	ctx := browser(t, map[string]any{"Authorization": "Bearer " + consoleKey})
	// state reads the drained cell and the holder of res on the fences page
	// and its drained line on the fence's own page.
	state := func(res string) (drained, holder, page string, red int) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/fences?prefix=/orders/"), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatal(err)
		}
		cells := eval[[]string](t, ctx, fmt.Sprintf(`(() => { for (const tr of document.querySelectorAll("#fences tbody tr"))
			if (tr.querySelector("td.resource").textContent.trim() === %q) return [tr.querySelector("td.drained").textContent.trim(), tr.querySelector("td.holder").textContent.trim()]; return ["missing", "missing"]; })()`, res))
		red = eval[int](t, ctx, `document.querySelectorAll("#fences .bad").length`)
		if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/fence?resource="+res), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatal(err)
		}
		page = eval[string](t, ctx, `document.querySelector("dd.drained").textContent.trim()`)
		return cells[0], cells[1], page, red
	}
	check := func(step, res, wantDrained, wantHolder string) {
		t.Helper()
		drained, holder, page, red := state(res)
		if drained != wantDrained {
			t.Errorf("%s: %s drained %q; want %q", step, res, drained, wantDrained)
		}
		if holder != wantHolder {
			t.Errorf("%s: %s holder %q; want %q", step, res, holder, wantHolder)
		}
		if wantRed := wantDrained == "draining"; (red > 0) != wantRed {
			t.Errorf("%s: %d cells in red; want red only while draining", step, red)
		}
		if !strings.HasPrefix(page, wantDrained) {
			t.Errorf("%s: %s's page says %q; want %s", step, res, page, wantDrained)
		}
	}

	old := acquire("/orders/7", "worker-a")
	// worker-a writes; the upstream holds the write. The lease moves to
	// worker-b (worker-a released it), whose token raises the fence while
	// worker-a's write is in flight.
	held := make(chan answer, 1)
	go func() { held <- put("/orders/7", old, map[string]string{"X-Hold": "1"}) }()
	select {
	case <-entered:
	case r := <-held:
		t.Fatalf("worker-a's write answered before the upstream saw it: %d %s", r.Status, r.Body)
	case <-time.After(30 * time.Second):
		t.Fatal("worker-a's write never reached the upstream")
	}
	if r := do(t, c, "POST", coord+"/v1/leases/release", strings.NewReader(fmt.Sprintf(`{"resource":"/orders/7","owner":"worker-a","token":%d}`, old)), jsonH); r.Status/100 != 2 {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	newer := acquire("/orders/7", "worker-b")
	check("older write in flight", "/orders/7", "draining", "worker-b")

	close(release)
	if r := <-held; r.Status != http.StatusNoContent {
		t.Fatalf("worker-a's held write: %d %s", r.Status, r.Body)
	}
	check("older write answered", "/orders/7", "awaiting first write", "worker-b")
	if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/fences?prefix=/orders/"), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
		t.Fatal(err)
	}
	shoot(t, ctx, "fences-awaiting.png")

	if r := put("/orders/7", newer, nil); r.Status != http.StatusNoContent {
		t.Fatalf("worker-b's write: %d %s", r.Status, r.Body)
	}
	check("written", "/orders/7", "yes", "worker-b")
}

// acquireLease takes a 5-minute lease on res for owner from the
// coordinator at coord and returns its token.
func acquireLease(t *testing.T, coord, res, owner string) int64 {
	t.Helper()
	a := do(t, &http.Client{}, "POST", coord+"/v1/leases/acquire", strings.NewReader(`{"resource":"`+res+`","owner":"`+owner+`","ttl":"5m"}`),
		map[string]string{"Content-Type": "application/json"})
	var lease struct{ Token int64 }
	if json.Unmarshal([]byte(a.Body), &lease); a.Status != 200 || lease.Token < 1 {
		t.Fatalf("acquire %s: %d %s", res, a.Status, a.Body)
	}
	return lease.Token
}
