package e2e

// Black-box tests of fence mode "shared": several real fencegate processes
// over one real PostgreSQL, in front of a recording upstream whose history
// is the durable state the invariants are checked on.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// sharedYAML is one replica in fence mode mode on the database dbURL, with a
// 3s upstream timeout (so the forward timeout a drain waits for a lost
// marker session is the 4s drain timeout).
func sharedYAML(mode, dbURL, upstream string, coordinator bool) string {
	return sharedYAMLTimeout(mode, dbURL, upstream, coordinator, 3*time.Second)
}

func sharedYAMLTimeout(mode, dbURL, upstream string, coordinator bool, timeout time.Duration) string {
	coord, verify := "", ", verify_tokens: false" // external tokens: not the coordinator's
	if coordinator {
		coord, verify = "coordinator: {enabled: true, listen: $COORDINATOR, default_ttl: 1s}\n", ""
	}
	return ordersGateway(upstream, timeout.String()) + fmt.Sprintf(`store:
  postgres: {url: %q, timeout: 2s}
fence: {mode: %s%s}
admin: {listen: $ADMIN}
%s`, dbURL, mode, verify, coord)
}

// sharedUpstream is a recording upstream; hold, if set, sees each request
// as it arrives, before its body is read; served, once the recorder has
// answered it (applied, or refused as incomplete).
type sharedUpstream struct {
	rec    *recorder.Recorder
	hold   func(r *http.Request)
	served func(r *http.Request)
	url    string
}

func newSharedUpstream(t *testing.T) *sharedUpstream {
	u := &sharedUpstream{rec: &recorder.Recorder{}}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h, served := u.hold, u.served
		mu.Unlock()
		if h != nil {
			h(r)
		}
		u.rec.ServeHTTP(w, r)
		if served != nil {
			served(r)
		}
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// sharedReplicas starts n replicas of one configuration.
func sharedReplicas(t *testing.T, n int, yaml string) []*Proc {
	var ps []*Proc
	for range n {
		ps = append(ps, startFencegate(t, yaml))
	}
	return ps
}

// sharedCheckHistory fails if any key's applied tokens ever decrease (I1).
func sharedCheckHistory(t *testing.T, h []recorder.Applied) {
	t.Helper()
	last := map[string]int64{}
	for i, a := range h {
		tok, err := strconv.ParseInt(a.Token, 10, 64)
		if err != nil {
			t.Fatalf("history[%d] %s: token %q", i, a.Key, a.Token)
		}
		if tok < last[a.Key] {
			t.Fatalf("history[%d]: %s applied token %d after %d\n%s", i, a.Key, tok, last[a.Key], recorder.Summary(h))
		}
		last[a.Key] = tok
	}
}

// Two replicas: B's write through replica 1, then A's stale write through
// replica 2 is refused; the database lowers nothing on direct SQL.
func TestSharedTwoReplicasStaleRefused(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, sharedYAML("shared", pg.URL, up.url, false))
	staleAcrossReplicas(t, r, up)

	// I7: no SQL path lowers the fence the gateways wrote.
	conn, err := pgx.Connect(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE fence SET highest = 41 WHERE resource = '/orders/7'`); err == nil {
		t.Fatal("UPDATE lowering the highest token succeeded")
	}
	st, body := write(t, "PUT", r[0].URL("gateway")+"/orders/7", "41", "A3")
	wantCode(t, "A after the SQL attempt", st, body, 409, "stale_fencing_token")
}

// Drain across replicas: an older write in flight through replica 1 holds
// back a newer one through replica 2 until it completes (I2).
func TestSharedDrainAcrossReplicas(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	drainAcrossReplicas(t, up, sharedReplicas(t, 2, sharedYAML("shared", pg.URL, up.url, false)))
}

// drainAcrossReplicas is TestSharedDrainAcrossReplicas on replicas r of
// any shared store (etcd_shared_test.go).
func drainAcrossReplicas(t *testing.T, up *sharedUpstream, r []*Proc) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up.rec.Delay = func(req *http.Request) {
		if req.Header.Get("Fencing-Token") == "1" {
			close(arrived)
			<-release
		}
	}
	aDone := make(chan int)
	go func() { st, _ := write(t, "PUT", r[0].URL("gateway")+"/orders/1", "1", "A"); aDone <- st }()
	<-arrived // A is at the upstream, its marker held by replica 1
	bDone := make(chan int)
	go func() { st, _ := write(t, "PUT", r[1].URL("gateway")+"/orders/1", "2", "B"); bDone <- st }()
	// Let B's advance commit and its drain start waiting; a broken drain
	// would forward B now and the recorder would apply it before A.
	waitForFence(t, r[1], "/orders/1", 2)
	time.Sleep(300 * time.Millisecond)
	close(release)
	if st := <-aDone; st != 200 {
		t.Fatalf("A: %d", st)
	}
	if st := <-bDone; st != 200 {
		t.Fatalf("B: %d", st)
	}
	if got, want := recorder.Summary(up.rec.HistoryOf("/orders/1")), "PUT A@1, PUT B@2"; got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
}

// An older write is at the upstream (its body fully sent, the upstream
// slow to apply it) through replica 1 when replica 1 is killed, PostgreSQL
// restarts, or the link between replica 1 and PostgreSQL is cut (every
// packet dropped). Its marker vanishes; a newer write through replica 2 is
// retried until it lands, and the upstream's recorded order proves the
// older one landed first: the drain waited for the forward timeout of the
// lost marker session instead of ending early (I2).
func TestSharedOlderLandsFirst(t *testing.T) {
	t.Run("kill9", func(t *testing.T) {
		pg := testenv.Postgres(t)
		sharedOlderFirst(t, pg.URL, pg.URL, func(r []*Proc) { r[0].Kill9() })
	})
	t.Run("postgres_restart", func(t *testing.T) {
		pg := testenv.PostgresIsolated(t)
		sharedOlderFirst(t, pg.URL, pg.URL, func([]*Proc) { pg.Restart(t, true) })
	})
	t.Run("cut_link", func(t *testing.T) {
		pg := testenv.Postgres(t)
		u, err := url.Parse(pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		px := testenv.Toxiproxy(t).Proxy(t, "pg", u.Host)
		u.Host = px.Listen
		sharedOlderFirst(t, u.String(), pg.URL, func([]*Proc) {
			px.AddToxic(t, testenv.Toxic{Name: "cut_down", Type: "timeout", Attributes: map[string]any{"timeout": 0}})
			px.AddToxic(t, testenv.Toxic{Name: "cut_up", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}})
		})
	})
}

func sharedOlderFirst(t *testing.T, db1, db2 string, disrupt func(r []*Proc)) {
	olderLandsFirst(t, func(upstream string) [2]string {
		return [2]string{sharedYAML("shared", db1, upstream, false), sharedYAML("shared", db2, upstream, false)}
	}, disrupt)
}

// olderLandsFirst is sharedOlderFirst on two replicas of any shared store,
// configured by yamls for the upstream's URL (etcd_shared_test.go).
func olderLandsFirst(t *testing.T, yamls func(upstream string) [2]string, disrupt func(r []*Proc)) {
	up := newSharedUpstream(t)
	y := yamls(up.url)
	r := []*Proc{startFencegate(t, y[0]), startFencegate(t, y[1])}
	const key = "/orders/o"
	if st, body := write(t, "PUT", r[0].URL("gateway")+key, "1", "A0"); st != 200 {
		t.Fatalf("A's first write: %d %s", st, body)
	}
	arrived, aServed := make(chan struct{}), make(chan struct{})
	var once, onceServed sync.Once
	const apply = 2 * time.Second // the upstream's time to apply A (< the 3s upstream timeout)
	up.rec.Delay = func(req *http.Request) {
		if req.Header.Get("X-Test") == "slow" {
			once.Do(func() { close(arrived) })
			time.Sleep(apply)
		}
	}
	up.served = func(req *http.Request) {
		if req.Header.Get("X-Test") == "slow" {
			onceServed.Do(func() { close(aServed) })
		}
	}
	go func() {
		req, _ := http.NewRequest("PUT", r[0].URL("gateway")+key, strings.NewReader("A1"))
		req.Header.Set("Fencing-Token", "1")
		req.Header.Set("X-Test", "slow")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived // A's body is at the upstream, A's marker held through replica 1
	disrupt(r)
	deadline := time.Now().Add(45 * time.Second)
	landThrough(t, r[1].URL("gateway")+key, "2", "B", deadline)
	// The upstream is done with A (applied it), however late a loaded
	// machine let it: a drain that ended early shows as B before A.
	select {
	case <-aServed:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream never finished A's write")
	}
	if got, want := recorder.Summary(up.rec.HistoryOf(key)), "PUT A0@1, PUT A1@1, PUT B@2"; got != want {
		t.Fatalf("upstream applied %q; want %q (the older write first)", got, want)
	}
}

// TestSharedManyInFlightFewConns: 2,000 writes in flight at once through
// one replica, held by a slow upstream until all have arrived, while the
// replica has at most 10 connections to PostgreSQL (pg_stat_activity, by
// the URL's application_name); every write is answered 200.
func TestSharedManyInFlightFewConns(t *testing.T) {
	const n, resources = 2000, 100
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	db := pg.URL + "&application_name=fg_many"
	r := startFencegate(t, sharedYAMLTimeout("shared", db, up.url, false, time.Minute))
	for i := range resources {
		if st, body := write(t, "PUT", fmt.Sprintf("%s/orders/m-%d", r.URL("gateway"), i), "1", "v"); st != 200 {
			t.Fatalf("first write: %d %s", st, body)
		}
	}
	var arrivedN atomic.Int64
	all, release := make(chan struct{}), make(chan struct{})
	up.hold = func(*http.Request) {
		if arrivedN.Add(1) == n {
			close(all)
		}
		<-release
	}
	var wg sync.WaitGroup
	var ok atomic.Int64
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			st, body, err := tryWriteTimeout(fmt.Sprintf("%s/orders/m-%d", r.URL("gateway"), i%resources), "1", "v", 2*time.Minute)
			if err != nil || st != 200 {
				errs <- fmt.Sprint(st, " ", body, " ", err)
				return
			}
			ok.Add(1)
		})
	}
	select {
	case <-all:
	case <-time.After(90 * time.Second):
		close(release)
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
			break
		}
		t.Fatalf("only %d of %d writes reached the upstream", arrivedN.Load(), n)
	}
	conns := pgBackends(t, pg.URL, "fg_many")
	close(release)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("write: %s", e)
	}
	t.Logf("%d writes in flight at once, %d database connections of the replica, %d answered 200", n, conns, ok.Load())
	if conns > 10 || conns == 0 {
		t.Fatalf("the replica had %d database connections with %d writes in flight; want 1..10", conns, n)
	}
}

// Restart PostgreSQL under load: while it is down every write is refused
// with 503 fence_unavailable and nothing reaches the upstream; after it is
// back the replicas decide correctly again, without a restart.
func TestSharedPostgresRestartUnderLoad(t *testing.T) {
	pg := testenv.PostgresIsolated(t)
	up := newSharedUpstream(t)
	r := sharedReplicas(t, 2, sharedYAML("shared", pg.URL, up.url, false))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, unavailable atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			key := fmt.Sprintf("/orders/load-%d", w)
			for tok := 1; ; tok++ {
				select {
				case <-stop:
					return
				default:
				}
				st, body, err := tryWrite(r[w%2].URL("gateway")+key, strconv.Itoa(tok/5+1), "v")
				switch {
				case err != nil:
					t.Errorf("%s: %v", key, err)
					return
				case st == 200:
					ok.Add(1)
				case st == 503 && (strings.Contains(body, "fence_unavailable") || strings.Contains(body, "fence_draining")):
					// Down, or after the restart: an advance waits out the
					// forward timeout of the marker sessions that vanished.
					unavailable.Add(1)
					time.Sleep(20 * time.Millisecond)
				default:
					t.Errorf("%s: %d %s", key, st, body)
					return
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	pg.Stop(t)
	// While down: fresh writes are refused and not forwarded.
	for i := range 6 {
		key := fmt.Sprintf("/orders/down-%d", i)
		st, body := write(t, "PUT", r[i%2].URL("gateway")+key, "1", "x")
		wantCode(t, "write with PostgreSQL down", st, body, 503, "fence_unavailable")
	}
	pg.Start(t)
	// Back: the replicas recover by themselves.
	for i := range 2 {
		waitForStatus(t, r[i].URL("gateway")+"/orders/after", "5", 200)
	}
	st, body := write(t, "PUT", r[0].URL("gateway")+"/orders/after", "4", "stale")
	wantCode(t, "stale write after the restart", st, body, 409, "stale_fencing_token")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	for i := range 6 {
		if h := up.rec.HistoryOf(fmt.Sprintf("/orders/down-%d", i)); len(h) > 0 {
			t.Fatalf("a write made while PostgreSQL was down reached the upstream: %s", recorder.Summary(h))
		}
	}
	sharedCheckHistory(t, up.rec.History())
	if unavailable.Load() == 0 || ok.Load() == 0 {
		t.Fatalf("load saw %d ok and %d unavailable; want both", ok.Load(), unavailable.Load())
	}
}

// Fence on issuance and token verification with the coordinator on the
// same database, in both modes: a zombie is refused as soon as a newer lease
// is issued, before the new owner wrote, and a forged token is refused as
// unknown_fencing_token without raising the fence.
func TestSharedFenceOnIssueAndVerify(t *testing.T) {
	for _, c := range []struct {
		mode     string
		replicas int
	}{{"local", 1}, {"shared", 2}} {
		t.Run(c.mode, func(t *testing.T) {
			pg := testenv.Postgres(t)
			up := newSharedUpstream(t)
			r := sharedReplicas(t, c.replicas, sharedYAML(c.mode, pg.URL, up.url, true))
			last := r[len(r)-1]
			const key = "/orders/9"
			forged := write2(t, last.URL("gateway")+key, "1152921504606846976", "forged")
			wantCode(t, "forged token", forged.status, forged.body, 409, "unknown_fencing_token")
			a := sharedAcquire(t, r[0].URL("coordinator"), key, "A")
			if st, body := write(t, "PUT", r[0].URL("gateway")+key, strconv.FormatInt(a, 10), "A1"); st != 200 {
				t.Fatalf("A's write: %d %s", st, body)
			}
			time.Sleep(1100 * time.Millisecond) // A's 1s lease expires
			b := sharedAcquire(t, last.URL("coordinator"), key, "B")
			st, body := write(t, "PUT", last.URL("gateway")+key, strconv.FormatInt(a, 10), "A2")
			wantCode(t, "A after B's lease was issued (B has not written)", st, body, 409, "stale_fencing_token")
			if st, body := write(t, "PUT", r[0].URL("gateway")+key, strconv.FormatInt(b, 10), "B1"); st != 200 {
				t.Fatalf("B's write: %d %s", st, body)
			}
			if got, want := recorder.Summary(up.rec.HistoryOf(key)), fmt.Sprintf("PUT A1@%d, PUT B1@%d", a, b); got != want {
				t.Fatalf("upstream applied %q; want %q", got, want)
			}
		})
	}
}

// A randomized run: workers with lease-like tokens through two replicas,
// zombies that pause and write late, replicas killed and restarted at
// random. The upstream's history must never apply a lower token after a
// higher one for the same key, and the workers' history must be
// linearizable against a fenced register (Porcupine).
func TestSharedRandomized(t *testing.T) {
	pg := testenv.Postgres(t)
	up := newSharedUpstream(t)
	sharedRandomized(t, up, sharedReplicas(t, 2, sharedYAML("shared", pg.URL, up.url, false)))
}

// sharedRandomized is TestSharedRandomized on replicas r of any shared
// store (etcd_shared_test.go).
func sharedRandomized(t *testing.T, up *sharedUpstream, r []*Proc) {
	var next atomic.Int64 // the "coordinator": tokens strictly increase
	hist := newHistory()
	deadline := time.Now().Add(12 * time.Second)
	var wg sync.WaitGroup
	var ok, refused, failed atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			key := fmt.Sprintf("/orders/rand-%d", rng.IntN(3))
			tok := next.Add(1)
			for time.Now().Before(deadline) {
				if rng.IntN(4) == 0 {
					tok = next.Add(1) // a new lease
				}
				if rng.IntN(8) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond) // a pause: a zombie
				}
				url := r[rng.IntN(2)].URL("gateway") + key
				call := hist.now()
				st, body, err := tryWrite(url, strconv.FormatInt(tok, 10), fmt.Sprint("w", w))
				hist.add(w, call, fencedInput{kind: opWrite, key: key, token: tok, owner: fmt.Sprint("w", w)}, writeOutcome(st, body, err))
				switch {
				case err != nil || st == 502 || st == 503:
					failed.Add(1) // a replica being killed, or the drain timing out
				case st == 200:
					ok.Add(1)
				case st == 409 && strings.Contains(body, "stale_fencing_token"):
					refused.Add(1)
					tok = next.Add(1) // a refused zombie re-acquires
				default:
					t.Errorf("%s@%d: %d %s", key, tok, st, body)
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for time.Now().Before(deadline.Add(-2 * time.Second)) {
		time.Sleep(time.Duration(1000+rng.IntN(1500)) * time.Millisecond)
		i := rng.IntN(2)
		r[i].Kill9()
		r[i].Restart()
	}
	wg.Wait()
	sharedCheckHistory(t, up.rec.History())
	hist.checkLinearizable(t)
	if ok.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("ok %d, refused %d, failed %d: the run did not exercise both decisions", ok.Load(), refused.Load(), failed.Load())
	}
	t.Logf("ok %d, refused %d, failed %d, applied %d", ok.Load(), refused.Load(), failed.Load(), len(up.rec.History()))
}

// waitForFence waits until the replica's admin API reports highest >= token.
func waitForFence(t *testing.T, p *Proc, resource string, token int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(p.URL("admin") + "/v1/fences?resource=" + resource)
		if err == nil {
			var st struct {
				Highest int64 `json:"highest"`
			}
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if st.Highest >= token {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence of %s did not reach %d", resource, token)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitForStatus(t *testing.T, url, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, body, err := tryWrite(url, token, "v")
		if err == nil && st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %s %v; want %d", url, st, body, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// staleAcrossReplicas is seed test 1 across two replicas on /orders/7: A
// writes with 41 through replica 2, B with 42 through replica 1, A's late
// write through replica 2 is refused stale, and the upstream applied A's
// first write and B's only.
func staleAcrossReplicas(t *testing.T, r []*Proc, up *sharedUpstream) {
	t.Helper()
	if st, body := write(t, "PUT", r[1].URL("gateway")+"/orders/7", "41", "A1"); st != 200 {
		t.Fatalf("A's first write: %d %s", st, body)
	}
	if st, body := write(t, "PUT", r[0].URL("gateway")+"/orders/7", "42", "B1"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}
	st, body := write(t, "PUT", r[1].URL("gateway")+"/orders/7", "41", "A2")
	wantCode(t, "A's stale write through replica 2", st, body, 409, "stale_fencing_token")
	if got, want := recorder.Summary(up.rec.HistoryOf("/orders/7")), "PUT A1@41, PUT B1@42"; got != want {
		t.Fatalf("upstream applied %q; want %q", got, want)
	}
}
