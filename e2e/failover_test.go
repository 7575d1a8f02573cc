package e2e

// PostgreSQL failover under load: a primary and a real streaming standby
// (pg_basebackup -R, the WAL through toxiproxy), two shared-mode replicas
// with their coordinators reaching the database through a libpq multi-host
// URL (target_session_attrs=read-write), leased workers writing; then the
// primary is killed (pg_ctl stop -m immediate) and the standby promoted.
// The replicas are not restarted: their pools follow the promotion. The
// upstream's history is the durable state checked (no token applied after
// a higher one, no token applied for two leases) and the workers' history
// is checked with Porcupine against a fenced register.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
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

// Asynchronous standby, 1s behind: the promoted store lost acknowledged
// issuances and advances. The replicas find it and refuse (503
// fence_store_regressed, /readyz failing) until `fencegate fence recover`;
// after it, every token issued before is refused and workers re-acquire.
func TestFailoverAsyncStandbyRefusedUntilRecovered(t *testing.T) {
	f := newFailover(t, false)
	t.Logf("%s: set up", time.Now().Format("15:04:05.000"))
	f.run(t, 2500*time.Millisecond)
	f.failover(t)
	// Both replicas refuse until the recovery, and say so.
	for _, r := range f.replicas {
		waitFor(t, func() bool {
			return getStatus(t, r.URL("admin")+"/readyz") == 503
		})
		st, body := write(t, "PUT", r.URL("gateway")+"/orders/fo-probe", strconv.FormatInt(f.lastToken.Load(), 10), "probe")
		wantCode(t, "write on the regressed store", st, body, 503, "fence_store_regressed")
		st, body = call(t, "POST", r.URL("coordinator")+"/v1/leases/acquire", `{"resource":"/orders/fo-probe","owner":"probe","ttl":"1s"}`, jsonCT)
		wantCode(t, "acquire on the regressed store", st, body, 503, "fence_store_regressed")
		waitLog(t, r, "fence store went back")
	}
	if h := f.up.rec.HistoryOf("/orders/fo-probe"); len(h) > 0 {
		t.Fatalf("a write reached the upstream on the regressed store: %s", recorder.Summary(h))
	}
	// The workers keep trying while the store is refused: nothing lands.
	applied := len(f.up.rec.History())
	f.runUntil(t, time.Second, "a worker refused with fence_store_regressed", func() bool { return f.regressedSeen.Load() > 0 })

	call := f.hist.now()
	cli := startCLI(t, nil, "fence", "recover", "-c", f.replicas[0].CfgPath, "--by", "e2e")
	if code := cli.Wait(); code != 0 {
		t.Fatalf("fence recover exited %d:\n%s", code, cli.Out.Tail(20))
	}
	var res struct {
		Recovered  bool  `json:"recovered"`
		TokenFloor int64 `json:"token_floor"`
	}
	out := cli.Out.String()
	if err := json.Unmarshal([]byte(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), &res); err != nil || !res.Recovered {
		t.Fatalf("fence recover: %v\n%s", err, out)
	}
	f.hist.recoverAll(call, res.TokenFloor)
	if got := len(f.up.rec.History()); got != applied {
		t.Fatalf("%d writes reached the upstream while the store was refused", got-applied)
	}
	// Idempotent: a second run does nothing.
	again := startCLI(t, nil, "fence", "recover", "-c", f.replicas[0].CfgPath)
	if code := again.Wait(); code != 0 || !strings.Contains(again.Out.String(), "nothing to recover") {
		t.Fatalf("second fence recover (%d):\n%s", code, again.Out.String())
	}
	for _, r := range f.replicas {
		waitFor(t, func() bool {
			return getStatus(t, r.URL("admin")+"/readyz") == 200
		})
	}
	before := f.ok.Load()
	f.runUntil(t, 2*time.Second, "a write through after the recovery", func() bool { return f.ok.Load() > before })
	f.check(t, res.TokenFloor)
}

// Synchronous standby: the promotion loses nothing and the replicas keep
// serving on the new primary without an operator, and without a restart.
func TestFailoverSyncStandbyKeepsServing(t *testing.T) {
	f := newFailover(t, true)
	f.run(t, 2500*time.Millisecond)
	f.failover(t)
	before := f.ok.Load()
	// 8s include the drains' wait for the lost marker sessions.
	f.runUntil(t, 8*time.Second, "a write through after the promotion", func() bool { return f.ok.Load() > before })
	for _, r := range f.replicas {
		if strings.Contains(r.Log(), "fence store went back") {
			t.Fatalf("a replica refused the synchronous standby's promotion:\n%s", r.Log())
		}
		if st := getStatus(t, r.URL("admin")+"/readyz"); st != 200 {
			t.Fatalf("readyz %d after the promotion", st)
		}
	}
	f.check(t, 0)
}

type failover struct {
	primary, standby *testenv.PG
	wal              *testenv.Proxy
	up               *sharedUpstream
	replicas         []*Proc
	hist             *history
	lastToken        atomic.Int64
	ok, refused      atomic.Int64
	regressedSeen    atomic.Int64
	rounds           int
}

func newFailover(t *testing.T, synchronous bool) *failover {
	f := &failover{hist: newHistory()}
	f.primary = testenv.PostgresIsolated(t)
	tp := testenv.Toxiproxy(t)
	f.wal = tp.Proxy(t, "wal", f.primary.Addr(t))
	f.standby = f.primary.Standby(t, f.wal.Listen)
	if synchronous {
		f.primary.Exec(t, "ALTER SYSTEM SET synchronous_standby_names = '*'")
	} else {
		f.wal.AddLatency(t, time.Second)
	}
	f.primary.Exec(t, "SELECT pg_reload_conf()")
	url := fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write",
		f.primary.Addr(t), f.standby.Addr(t), f.primary.Database)
	f.up = newSharedUpstream(t)
	f.replicas = sharedReplicas(t, 2, sharedYAML("shared", url, f.up.url, true))
	// The replicas recorded how the primary replicates (the guard's check
	// each second), and the record reached the standby.
	want := "1 async"
	if synchronous {
		want = "1 sync"
	}
	waitFor(t, func() bool { return metaValue(t, f.standby, "replication") == want })
	return f
}

// metaValue reads a fencegate_meta value on pg ("" if none or unreachable).
func metaValue(t *testing.T, pg *testenv.PG, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var v string
	conn.QueryRow(ctx, "SELECT value FROM fencegate_meta WHERE key = $1", key).Scan(&v)
	return v
}

// sequenceOf reads the token sequence's last value on pg.
func sequenceOf(pg *testenv.PG) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	var v int64
	if err := conn.QueryRow(ctx, "SELECT last_value FROM resource_fence_token_seq").Scan(&v); err != nil {
		return err.Error()
	}
	return strconv.FormatInt(v, 10)
}

// failover kills the primary as `pg_ctl stop -m immediate` does and
// promotes the standby. The WAL link goes down with the primary: what was
// still on its way to the standby never arrives.
func (f *failover) failover(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	f.workers(t, stop, &wg)
	time.Sleep(300 * time.Millisecond)
	t.Logf("%s: crashing the primary (last token issued %d)", time.Now().Format("15:04:05.000"), f.lastToken.Load())
	f.wal.SetEnabled(t, false)
	f.primary.Crash(t)
	f.standby.Promote(t)
	t.Logf("%s: standby promoted; its token sequence stands at %s", time.Now().Format("15:04:05.000"), sequenceOf(f.standby))
	time.Sleep(300 * time.Millisecond)
	close(stop)
	t0 := time.Now()
	wg.Wait()
	t.Logf("%s: workers stopped (%s to stop)", time.Now().Format("15:04:05.000"), time.Since(t0))
}

// run lets the workers write for d.
func (f *failover) run(t *testing.T, d time.Duration) {
	f.runUntil(t, d, "", func() bool { return true })
}

// runUntil is run for d, and then on until cond holds (bounded: 30s in
// all; what names it when it does not): a loaded machine may need more
// than d to get there.
func (f *failover) runUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	f.workers(t, stop, &wg)
	start := time.Now()
	for time.Since(start) < d || !cond() {
		if time.Since(start) > max(d, 30*time.Second) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	t0 := time.Now()
	wg.Wait()
	t.Logf("%s: workers stopped (%s to stop)", time.Now().Format("15:04:05.000"), time.Since(t0))
	if !cond() {
		t.Fatalf("no %s within %s", what, t0.Sub(start).Round(time.Second))
	}
}

// workers starts leased workers on a few resources until stop: each
// acquires a lease (1s) on a random resource through a random replica's
// coordinator, writes with its token through random replicas, sometimes
// pauses past its lease (a zombie), and takes a new lease when refused as
// stale or, now and then, after a write.
func (f *failover) workers(t *testing.T, stop chan struct{}, wg *sync.WaitGroup) {
	f.rounds++
	const n = 6
	for w := range n {
		client := f.rounds*100 + w
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(client), 11))
			var key string
			var token int64
			var owner string
			lease := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := f.replicas[rng.IntN(len(f.replicas))]
				if token == 0 {
					key = fmt.Sprintf("/orders/fo-%d", rng.IntN(4))
					lease++
					owner = fmt.Sprintf("c%d-%d", client, lease)
					call := f.hist.now()
					tok, st, body, err := tryAcquire(r.URL("coordinator"), key, owner)
					switch {
					case err == nil && st == 200:
						token = tok
						f.lastToken.Store(max(f.lastToken.Load(), tok))
						f.hist.add(client, call, fencedInput{kind: opIssue, key: key, token: tok, owner: owner}, "")
					case err == nil && strings.Contains(body, "fence_store_regressed"):
						f.regressedSeen.Add(1) // refused: no token handed out
						time.Sleep(50 * time.Millisecond)
					case err == nil && st == 409:
						time.Sleep(20 * time.Millisecond) // held by another worker
					default:
						f.hist.add(client, call, fencedInput{kind: opIssueUnknown, key: key, owner: owner}, "")
						time.Sleep(50 * time.Millisecond)
					}
					continue
				}
				if rng.IntN(12) == 0 {
					time.Sleep(time.Duration(1000+rng.IntN(400)) * time.Millisecond) // past the lease: a zombie
				}
				call := f.hist.now()
				st, body, err := tryWriteTimeout(r.URL("gateway")+key, strconv.FormatInt(token, 10), owner, 10*time.Second)
				out := writeOutcome(st, body, err)
				f.hist.add(client, call, fencedInput{kind: opWrite, key: key, token: token, owner: owner}, out)
				switch {
				case out == outOK:
					f.ok.Add(1)
					if rng.IntN(4) == 0 {
						token = 0 // done with this lease: the next one (it expires by itself)
					}
				case out == outStale:
					f.refused.Add(1)
					token = 0 // re-acquire
				case strings.Contains(body, "fence_store_regressed"):
					f.regressedSeen.Add(1)
					time.Sleep(50 * time.Millisecond)
				case st == 400 || st == 404 || st == 428:
					t.Errorf("%s@%d: %d %s", key, token, st, body)
					return
				default:
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

// tryAcquire takes a 1s lease through the coordinator's HTTP API.
func tryAcquire(coord, resource, owner string) (int64, int, string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(coord+"/v1/leases/acquire", "application/json",
		strings.NewReader(fmt.Sprintf(`{"resource":%q,"owner":%q,"ttl":"1s"}`, resource, owner)))
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	var buf [4096]byte
	for {
		n, err := resp.Body.Read(buf[:])
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var out struct {
		Token int64 `json:"token"`
	}
	json.Unmarshal([]byte(b.String()), &out)
	return out.Token, resp.StatusCode, b.String(), nil
}

// check: on the upstream's durable history, no token applied after a
// higher one for its resource (I1), no token applied for two leases (I5),
// no write applied after the recovery with a token below its floor; and
// the workers' history is linearizable against a fenced register.
func (f *failover) check(t *testing.T, floor int64) {
	t.Helper()
	h := f.up.rec.History()
	regressions, dups, belowFloor := 0, 0, 0
	last := map[string]int64{}
	owners := map[string]string{}
	floorAt := -1
	for i, a := range h {
		tok, err := strconv.ParseInt(a.Token, 10, 64)
		if err != nil {
			t.Fatalf("history[%d]: token %q", i, a.Token)
		}
		if tok < last[a.Key] {
			regressions++
			t.Errorf("history[%d]: %s applied token %d after %d", i, a.Key, tok, last[a.Key])
		}
		last[a.Key] = max(last[a.Key], tok)
		if o, ok := owners[a.Token]; ok && o != a.Value {
			dups++
			t.Errorf("history[%d]: token %s applied for two leases (%s and %s)", i, a.Token, o, a.Value)
		}
		owners[a.Token] = a.Value
		if floor > 0 && tok > floor && floorAt < 0 {
			floorAt = i
		}
		if floorAt >= 0 && tok <= floor {
			belowFloor++
			t.Errorf("history[%d]: %s applied token %d issued before the recovery (floor %d)", i, a.Key, tok, floor)
		}
	}
	t.Logf("upstream applied %d writes: %d regressions, %d tokens applied for two leases; workers: %d ok, %d stale, %d refused as regressed",
		len(h), regressions, dups, f.ok.Load(), f.refused.Load(), f.regressedSeen.Load())
	f.hist.checkLinearizable(t)
}
