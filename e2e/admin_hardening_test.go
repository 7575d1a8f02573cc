package e2e

// The operator's side of the gateway: the admin and coordinator APIs refuse what a
// browser page can send (CSRF, DNS rebinding); a hand advance is capped and
// raises the token counter; a fence raised by mistake can be reset only as
// far as the coordinator's records allow; forged tokens are refused through
// a shared replica without a coordinator of its own and, where tokens are
// not verified, cannot raise a fence by more than fence.max_advance; lease
// names are canonical; trickled connections to the admin port do not starve
// the gateway; /readyz does not show the database's address.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5"
)

func boltCoordYAML(upstream, extra string) string {
	return gatewayYAML(upstream) + "coordinator: {enabled: true, listen: $COORDINATOR}\n" + extra
}

func TestAdminRefusesBrowserRequests(t *testing.T) {
	_, up := newUpstream(t)
	p := startFencegate(t, boltCoordYAML(up, ""))
	adv := `{"resource":"/orders/1","token":5}`
	for _, api := range []struct{ name, url, body string }{
		{"admin", p.URL("admin") + "/v1/fences/advance", adv},
		{"coordinator", p.URL("coordinator") + "/v1/leases/acquire", `{"resource":"/orders/1","owner":"A"}`},
	} {
		t.Run(api.name, func(t *testing.T) {
			for _, c := range []struct {
				what    string
				headers []string
				status  int
			}{
				{"text/plain POST (a cross-origin form)", []string{"Content-Type: text/plain"}, 415},
				{"form POST", []string{"Content-Type: application/x-www-form-urlencoded"}, 415},
				{"no Content-Type", nil, 415},
				{"DNS-rebound Host", []string{jsonCT, "Host: evil.example:9090"}, 403},
				{"cross-site Origin", []string{jsonCT, "Origin: http://evil.example"}, 403},
				{"Sec-Fetch-Site cross-site", []string{jsonCT, "Sec-Fetch-Site: cross-site"}, 403},
				{"null Origin", []string{jsonCT, "Origin: null"}, 403},
			} {
				st, body := call(t, "POST", api.url, api.body, c.headers...)
				if st != c.status {
					t.Errorf("%s: %d %s; want %d", c.what, st, body, c.status)
				}
			}
			// Nothing above took effect; a proper request does.
			if st, body := call(t, "POST", api.url, api.body, jsonCT, "Host: localhost"); st != 200 {
				t.Fatalf("JSON request with Host localhost: %d %s", st, body)
			}
		})
	}
	st, body := call(t, "GET", p.URL("admin")+"/v1/fences?resource=/orders/1", "")
	// Only the JSON advance to 5 and the JSON acquire happened: the
	// advance raised the token counter, so the lease got 6 and raised the
	// fence to it.
	if st != 200 || !strings.Contains(body, `"highest":6`) {
		t.Fatalf("fence after the refused requests: %d %s; want highest 6", st, body)
	}
}

// The store under test: the embedded one, or PostgreSQL in shared mode.
type storeCase struct {
	name  string
	store func(t *testing.T) (yaml, dbURL string)
}

func storeCases() []storeCase {
	pgStore := func(mode string) func(t *testing.T) (string, string) {
		return func(t *testing.T) (string, string) {
			url := testenv.Postgres(t).URL
			return fmt.Sprintf("store:\n  postgres: {url: %q, timeout: 2s}\nfence: {mode: %s}\n", url, mode), url
		}
	}
	return []storeCase{
		{"embedded", func(t *testing.T) (string, string) { return "store:\n  embedded: {path: $DIR/fencegate.db}\n", "" }},
		{"postgres-shared", pgStore("shared")},
		{"postgres-local", pgStore("local")},
	}
}

func coordYAML(upstream, store, extra string) string {
	return ordersGateway(upstream, "10s") + store + `admin: {listen: $ADMIN}
coordinator: {enabled: true, listen: $COORDINATOR}
` + extra
}

// Finding 5: `fence advance R 9223372036854775807` bricked R, and a hand
// advance to 50 followed by a new lease gave token 1 (refused: locked
// out). Now the advance is capped above the highest token issued, and it
// raises the token counter, so the next lease is above it.
func TestAdminAdvanceCappedAndRaisesTokens(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			_, up := newUpstream(t)
			store, _ := sc.store(t)
			p := startFencegate(t, coordYAML(up, store, ""))
			admin, coord, gw := p.URL("admin"), p.URL("coordinator"), p.URL("gateway")
			const r = "/orders/adv"
			a := acquire(t, coord, r, "A")
			st, body := call(t, "POST", admin+"/v1/fences/advance", fmt.Sprintf(`{"resource":%q,"token":%d}`, r, int64(fencegate.MaxToken)), jsonCT)
			wantCode(t, "advance to MaxInt64", st, body, 409, fencegate.CodeTokenOutOfRange)
			st, body = call(t, "POST", admin+"/v1/fences/advance", fmt.Sprintf(`{"resource":%q,"token":%d}`, r, a+1_000_001), jsonCT)
			wantCode(t, "advance beyond max_advance", st, body, 409, fencegate.CodeTokenOutOfRange)
			adv := a + 50_000
			if st, body := call(t, "POST", admin+"/v1/fences/advance", fmt.Sprintf(`{"resource":%q,"token":%d}`, r, adv), jsonCT); st != 200 {
				t.Fatalf("advance to %d: %d %s", adv, st, body)
			}
			waitLog(t, p, `"msg":"fence_advanced_by_hand"`, `"operator":"(unauthenticated) 127.0.0.1:`)
			release(t, coord, r, "A", a)
			b := acquire(t, coord, r, "B")
			if b <= adv {
				t.Fatalf("the lease after an advance to %d has token %d: locked out", adv, b)
			}
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(b, 10), "B1"); st != 200 {
				t.Fatalf("B's write with %d: %d %s", b, st, body)
			}
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(a, 10), "A-zombie"); st != 409 {
				t.Fatalf("A's stale write: %d %s", st, body)
			}
		})
	}
}

// A fence raised by mistake (here: a hand advance 50000 above the issued
// tokens, then every worker of the resource would wait for a lease above
// it... or an operator's typo) is lowered by `fence reset`, never below the
// highest token issued, and only with confirm; stale tokens stay refused
// afterwards; PostgreSQL's guard still refuses every other decrease.
func TestAdminFenceReset(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			rec, up := newUpstream(t)
			store, dbURL := sc.store(t)
			p := startFencegate(t, coordYAML(up, store, ""))
			admin, coord, gw := p.URL("admin"), p.URL("coordinator"), p.URL("gateway")
			const r = "/orders/reset"
			old := acquire(t, coord, r, "old")
			release(t, coord, r, "old", old)
			cur := acquire(t, coord, r, "cur")
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(cur, 10), "C1"); st != 200 {
				t.Fatalf("cur's write: %d %s", st, body)
			}
			mistake := cur + 40_000
			if st, body := call(t, "POST", admin+"/v1/fences/advance", fmt.Sprintf(`{"resource":%q,"token":%d}`, r, mistake), jsonCT); st != 200 {
				t.Fatalf("advance: %d %s", st, body)
			}
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(cur, 10), "C2"); st != 409 {
				t.Fatalf("cur after the mistaken advance: %d %s; want refused", st, body)
			}
			reset := func(to int64, confirm string) (int, string) {
				return call(t, "POST", admin+"/v1/fences/reset", fmt.Sprintf(`{"resource":%q,"to":%d,"confirm":%q}`, r, to, confirm), jsonCT)
			}
			st, body := reset(cur, "")
			wantCode(t, "reset without confirm", st, body, 400, fencegate.CodeInvalidRequest)
			st, body = reset(cur-1, r)
			wantCode(t, "reset below the highest token issued", st, body, 409, fencegate.CodeTokenOutOfRange)
			if st, body := call(t, "GET", admin+"/v1/fences?resource="+r, ""); !strings.Contains(body, fmt.Sprintf(`"highest":%d`, mistake)) {
				t.Fatalf("a refused reset changed the fence: %d %s", st, body)
			}
			if st, body := reset(cur, "/orders//reset"); st != 200 {
				t.Fatalf("reset to %d: %d %s", cur, st, body)
			}
			waitLog(t, p, `"msg":"fence_reset_by_hand"`, `"from":`+strconv.FormatInt(mistake, 10))
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(cur, 10), "C3"); st != 200 {
				t.Fatalf("cur after the reset: %d %s", st, body)
			}
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(old, 10), "O1"); st != 409 {
				t.Fatalf("an older issued token after the reset: %d %s; want refused", st, body)
			}
			if st, body := write(t, "PUT", gw+r, strconv.FormatInt(mistake, 10), "F1"); st != 409 {
				t.Fatalf("the mistaken token after the reset: %d %s; want refused (never issued)", st, body)
			}
			release(t, coord, r, "cur", cur)
			if next := acquire(t, coord, r, "next"); next <= cur {
				t.Fatalf("next lease %d is not above the reset value %d", next, cur)
			}
			if got, want := applied(rec, r), fmt.Sprintf("PUT C1@%d, PUT C3@%d", cur, cur); got != want {
				t.Fatalf("upstream applied %q; want %q", got, want)
			}
			if dbURL != "" {
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, dbURL)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, `UPDATE fence SET highest = 1 WHERE resource = $1`, r); err == nil || !strings.Contains(err.Error(), "may not decrease") {
					t.Fatalf("direct SQL lowering the fence: %v; want the guard's refusal", err)
				}
				// Announcing a reset to another value does not unlock it.
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, `SELECT set_config('fencegate.fence_reset', $1::text || E'\n' || '2', true)`, r); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, `UPDATE fence SET highest = 1 WHERE resource = $1`, r); err == nil {
					t.Fatal("the guard let a decrease through that no reset announced")
				}
			}
		})
	}
}

func TestAdminResetNeedsVerification(t *testing.T) {
	_, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up)) // no coordinator: tokens not verified
	if st, body := write(t, "PUT", p.URL("gateway")+"/orders/x", "100", "v"); st != 200 {
		t.Fatalf("write: %d %s", st, body)
	}
	st, body := call(t, "POST", p.URL("admin")+"/v1/fences/reset", `{"resource":"/orders/x","to":1,"confirm":"/orders/x"}`, jsonCT)
	if st != 409 || !strings.Contains(body, "not verified") {
		t.Fatalf("reset without verification: %d %s; want 409", st, body)
	}
	if st, body := write(t, "PUT", p.URL("gateway")+"/orders/x", "99", "stale"); st != 409 {
		t.Fatalf("stale write: %d %s", st, body)
	}
}

// Finding 6: a replica that does not run the coordinator verifies tokens by
// default in shared mode: the database holds the coordinator's records.
func TestSharedReplicaWithoutCoordinatorVerifiesByDefault(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	withCoord := startFencegate(t, sharedYAML("shared", pg.URL, up.url, true))
	plain := ordersGateway(up.url, "10s") + fmt.Sprintf(`store:
  postgres: {url: %q, timeout: 2s}
fence: {mode: shared}
admin: {listen: $ADMIN}
`, pg.URL)
	replica := startFencegate(t, plain)
	const r = "/orders/forged"
	st, body := write(t, "PUT", replica.URL("gateway")+r, "9223372036854775807", "forged")
	wantCode(t, "forged MaxInt64 token through a replica without coordinator", st, body, 409, fencegate.CodeUnknownToken)
	tok := sharedAcquire(t, withCoord.URL("coordinator"), r, "A")
	if st, body := write(t, "PUT", replica.URL("gateway")+r, strconv.FormatInt(tok, 10), "A1"); st != 200 {
		t.Fatalf("the issued token through the replica: %d %s", st, body)
	}
}

// Finding 11: without verification, one write may raise a fence by at most
// fence.max_advance, a new resource's first write included.
func TestUnverifiedTokensCeiling(t *testing.T) {
	_, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up)+"fence: {max_advance: 1000}\n")
	gw := p.URL("gateway")
	st, body := write(t, "PUT", gw+"/orders/c", "9223372036854775807", "brick")
	wantCode(t, "MaxInt64 on a new resource", st, body, 409, fencegate.CodeTokenOutOfRange)
	st, body = write(t, "PUT", gw+"/orders/c", "1001", "far")
	wantCode(t, "1001 on a new resource", st, body, 409, fencegate.CodeTokenOutOfRange)
	for _, tok := range []string{"1000", "2000", "2000", "2500"} {
		if st, body := write(t, "PUT", gw+"/orders/c", tok, "w"+tok); st != 200 {
			t.Fatalf("write %s: %d %s", tok, st, body)
		}
	}
	st, body = write(t, "PUT", gw+"/orders/c", "3501", "far")
	wantCode(t, "1001 above the highest", st, body, 409, fencegate.CodeTokenOutOfRange)
	st, body = call(t, "POST", p.URL("admin")+"/v1/fences/advance", `{"resource":"/orders/c","token":9223372036854775807}`, jsonCT)
	wantCode(t, "advance to MaxInt64 without verification", st, body, 409, fencegate.CodeTokenOutOfRange)
	if st, body := write(t, "PUT", gw+"/orders/c", "3500", "ok"); st != 200 {
		t.Fatalf("the resource is still writable: %d %s", st, body)
	}
}

// Finding 11: "/orders/22" and "/orders//22" were two leases held at once.
func TestLeaseNamesCanonical(t *testing.T) {
	_, up := newUpstream(t)
	p := startFencegate(t, boltCoordYAML(up, ""))
	coord := p.URL("coordinator")
	a := acquire(t, coord, "/orders//22", "A")
	for _, spelling := range []string{"/orders/./22", "/orders//22/", "/orders/22/"} {
		st, body := call(t, "POST", coord+"/v1/leases/acquire", `{"resource":"`+spelling+`","owner":"B"}`, jsonCT)
		wantCode(t, "B on "+spelling+", another spelling of A's lease", st, body, 409, fencegate.CodeLeaseHeld)
	}
	st, body := call(t, "POST", coord+"/v1/leases/acquire", `{"resource":"/orders/./22","owner":"B"}`, jsonCT)
	if st != 409 || !strings.Contains(body, `"resource":"/orders/22"`) {
		t.Errorf("refusal does not name the canonical resource: %d %s", st, body)
	}
	st, body = call(t, "GET", coord+"/v1/leases?resource=/orders/22", "")
	if st != 200 || !strings.Contains(body, fmt.Sprintf(`"token":%d`, a)) {
		t.Fatalf("show /orders/22: %d %s", st, body)
	}
	for _, bad := range []string{"/orders/../admin", "/orders/%2e%2e/x", "/orders/a%2Fb", "/orders/\\u0001"} {
		st, body := call(t, "POST", coord+"/v1/leases/acquire", `{"resource":"`+bad+`","owner":"C"}`, jsonCT)
		wantCode(t, "lease on "+bad, st, body, 400, fencegate.CodeInvalidRequest)
	}
	// The token verifies the write to the gateway's key for /orders//22.
	if st, body := write(t, "PUT", p.URL("gateway")+"/orders//22", strconv.FormatInt(a, 10), "A1"); st != 200 {
		t.Fatalf("A's write: %d %s", st, body)
	}
}

// Finding 8: thousands of trickled bodies at the admin port took every file
// descriptor and the gateway stopped accepting. The process runs with 1024
// descriptors; 2200 connections trickle a body to the admin port; the
// gateway still forwards writes.
func TestAdminTrickleDoesNotStarveGateway(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is needed to lower the process's descriptor limit")
	}
	_, up := newUpstream(t)
	p := startFencegate(t, gatewayYAML(up))
	if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(p.cmd.Process.Pid), "--nofile=1024:1024").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v %s", err, out)
	}
	addr := strings.TrimPrefix(p.URL("admin"), "http://")
	const n = 2200
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	sem := make(chan struct{}, 64)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return // the accept queue is full: the kernel drops the SYN
			}
			fmt.Fprintf(c, "POST /v1/fences/advance HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("%d trickling connections open to the admin port", len(conns))
	if len(conns) < 1100 {
		t.Fatalf("only %d connections: the test does not exceed the descriptor limit", len(conns))
	}
	// The bound is not a speed assertion: without the admin cap, accept
	// fails with EMFILE and the gateway answers only once the admin
	// listener's read timeout (30s) has closed trickling connections; the
	// writes must succeed while every one of them is still open.
	client := &http.Client{Timeout: 20 * time.Second}
	for i := range 20 {
		tok := strconv.Itoa(i + 1)
		req, _ := http.NewRequest("PUT", p.URL("gateway")+"/orders/fd", strings.NewReader("w"+tok))
		req.Header.Set("Fencing-Token", tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("gateway write %d while the admin port is flooded: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("gateway write %d while the admin port is flooded: %s", i, resp.Status)
		}
	}
	waitLog(t, p, "connection cap", `"listener":"admin"`)
}

// Finding 11: /readyz showed the database user, name and address.
func TestReadyzShowsNoSecrets(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	_, up := newUpstream(t)
	p := startFencegate(t, ordersGateway(up, "")+fmt.Sprintf(`store:
  postgres: {url: %q, timeout: 1s}
admin: {listen: $ADMIN}
`, pg.URL))
	pg.Stop(t)
	st, body := call(t, "GET", p.URL("admin")+"/readyz", "")
	if st != 503 {
		t.Fatalf("readyz with the database down: %d %s", st, body)
	}
	host, port, _ := net.SplitHostPort(strings.Split(strings.Split(pg.URL, "@")[1], "/")[0])
	for _, secret := range []string{pg.Database, port, "password", "user=", "dial", host} {
		if secret != "" && strings.Contains(body, secret) {
			t.Errorf("readyz body %q shows %q", body, secret)
		}
	}
	waitLog(t, p, "readyz: store unavailable", `"err":`)
	st, body = call(t, "GET", p.URL("admin")+"/healthz", "")
	if st != 200 {
		t.Fatalf("healthz: %d %s", st, body)
	}
}
