package shared

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// pairResources is the number of resources of BenchmarkSharedPair, each
// with its own lease (and so its own token), written with that token
// again and again.
const pairResources = 64

// BenchmarkSharedPair prints, in one run, the figures of shared mode
// against local mode:
//
//  1. 0 ms upstream, 64 writers, 64 resources each with its own lease and
//     a repeated token, 3 alternating rounds (local, shared): req/s of one
//     local gateway and of two shared replicas together (medians), and the
//     database statements per fenced write (pg_stat_statements, every
//     client of the database, reset before each shared round).
//  2. 50 ms upstream, 256 writers: the two replicas against one local
//     gateway (local, shared, local), non-2xx answers, the most database
//     connections of one replica (pg_stat_activity); then 2,000 writers in
//     flight at once through the two replicas, non-2xx answers.
//  3. The latency the gateway adds at a constant rate (vegeta,
//     FENCEGATE_BENCH_RATE req/s, default 500): p50 and p99 direct to the
//     upstream, through the local gateway, through the shared pair.
//
// FENCEGATE_BENCH_SECONDS (default 10) is the length of each run;
// FENCEGATE_BENCH_CPUPROFILE profiles the first 0 ms round of each side.
func BenchmarkSharedPair(b *testing.B) {
	d := seconds()
	pg, conn := pgStatements(b)
	ctx := context.Background()
	tokens := pairLeases(b, pg.URL)
	res := writePath(pairResources)
	url := func(base string, r int) string { return fmt.Sprintf("%s/bench/p%d", base, r) }
	tok := func(r int) string { return strconv.FormatInt(tokens[r], 10) }
	token := func(c, i int) string { return tok(res(c, i)) }

	// 1. Fast upstream.
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok\n"))
	}))
	b.Cleanup(fast.Close)
	local := localGateway(b, fast.URL)
	rs := []*replica{newReplicaNamed(b, pg.URL, fast.URL, "bench_p1"), newReplicaNamed(b, pg.URL, fast.URL, "bench_p2")}
	pairWarm(b, []string{local, rs[0].srv.URL, rs[1].srv.URL}, url, tok)
	const writers = 64
	var localRPS, sharedRPS, perWrite, rtPerWrite []float64
	var errs int64
	b.ResetTimer()
	for round := range 3 {
		stop := func() {}
		if round == 0 {
			stop = profilePhase(b, "pair-local")
		}
		ok, bad, el := drive(writers, d, func(c, i int) string { return url(local, res(c, i)) }, token)
		stop()
		localRPS = append(localRPS, float64(ok)/el.Seconds())
		errs += bad
		shared := func(c, i int) string { return url(rs[res(c, i)%2].srv.URL, res(c, i)) }
		warmUp(writers, shared, token)
		if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			b.Fatal(err)
		}
		rt0 := rs[0].fence.RoundTrips() + rs[1].fence.RoundTrips()
		if round == 0 {
			stop = profilePhase(b, "pair-shared")
		}
		ok, bad, el = drive(writers, d, shared, token)
		stop()
		calls := statementCalls(b, conn)
		sharedRPS = append(sharedRPS, float64(ok)/el.Seconds())
		perWrite = append(perWrite, float64(calls)/float64(ok+bad))
		rtPerWrite = append(rtPerWrite, float64(rs[0].fence.RoundTrips()+rs[1].fence.RoundTrips()-rt0)/float64(ok+bad))
		errs += bad
	}
	b.StopTimer()
	lr, sr := median(localRPS), median(sharedRPS)
	out := os.Stdout
	fmt.Fprintf(out, "\n== 0 ms upstream, %d writers, %d resources (own lease, repeated token), 3 rounds of %v, medians\n", writers, pairResources, d)
	fmt.Fprintf(out, "%-44s %12.0f   rounds %s\n", "one local gateway req/s", lr, fmtAll(localRPS, "%.0f"))
	fmt.Fprintf(out, "%-44s %12.0f   rounds %s\n", "two shared replicas together req/s", sr, fmtAll(sharedRPS, "%.0f"))
	fmt.Fprintf(out, "%-44s %12.2f   (goal >= 0.8)\n", "shared / local", sr/lr)
	fmt.Fprintf(out, "%-44s %12.3f   rounds %s (goal <= 0.25)\n", "db statements per fenced write (all clients)", median(perWrite), fmtAll(perWrite, "%.3f"))
	fmt.Fprintf(out, "%-44s %12.3f   rounds %s\n", "fence round trips per fenced write", median(rtPerWrite), fmtAll(rtPerWrite, "%.3f"))
	fmt.Fprintf(out, "%-44s %12d\n", "non-2xx or failed", errs)
	b.ReportMetric(sr/lr, "shared/local_0ms")
	b.ReportMetric(median(perWrite), "statements/write")

	// 2. Slow upstream.
	slow := slowUpstream(b, 50*time.Millisecond)
	local50 := localGateway(b, slow)
	rs50 := []*replica{newReplicaNamed(b, pg.URL, slow, "bench_s1"), newReplicaNamed(b, pg.URL, slow, "bench_s2")}
	pairWarm(b, []string{local50, rs50[0].srv.URL, rs50[1].srv.URL}, url, tok)
	const slowWriters = 256
	l1, lbad1, le1 := drive(slowWriters, d, func(c, i int) string { return url(local50, res(c, i)) }, token)
	var maxConns [2]int
	shared50 := func(c, i int) string { return url(rs50[res(c, i)%2].srv.URL, res(c, i)) }
	warmUp(slowWriters, shared50, token)
	stopSampling := sampleConns(conn, []string{"bench_s1", "bench_s2"}, maxConns[:])
	s, sbad, se := drive(slowWriters, d, shared50, token)
	stopSampling()
	l2, lbad2, le2 := drive(slowWriters, d, func(c, i int) string { return url(local50, res(c, i)) }, token)
	localWPS := (float64(l1)/le1.Seconds() + float64(l2)/le2.Seconds()) / 2
	sharedWPS := float64(s) / se.Seconds()
	const inFlight = 2000
	var maxFlight [2]int
	stopSampling = sampleConns(conn, []string{"bench_s1", "bench_s2"}, maxFlight[:])
	fok, fbad, _ := drive(inFlight, min(d, 5*time.Second), func(c, i int) string { return url(rs50[c%2].srv.URL, res(c, i)) }, token)
	stopSampling()
	fmt.Fprintf(out, "\n== 50 ms upstream, %d writers, %v each (local, shared, local)\n", slowWriters, d)
	fmt.Fprintf(out, "%-44s %12.0f\n", "one local gateway req/s (mean)", localWPS)
	fmt.Fprintf(out, "%-44s %12.0f\n", "two shared replicas together req/s", sharedWPS)
	fmt.Fprintf(out, "%-44s %12.2f   (goal >= 0.9)\n", "shared / local", sharedWPS/localWPS)
	fmt.Fprintf(out, "%-44s %12d   (goal <= 10)\n", "most db connections of one replica", max(maxConns[0], maxConns[1]))
	fmt.Fprintf(out, "%-44s %12d   (local %d)\n", "shared non-2xx or failed", sbad, lbad1+lbad2)
	fmt.Fprintf(out, "%-44s %12d   (%d answered 2xx; most db connections of one replica %d)\n", fmt.Sprintf("%d in flight: non-2xx or failed", inFlight), fbad, fok, max(maxFlight[0], maxFlight[1]))
	b.ReportMetric(sharedWPS/localWPS, "shared/local_50ms")
	b.ReportMetric(float64(sbad+fbad), "shared_non2xx_50ms")

	// 3. Latency at a constant rate.
	rate := 500
	if n, err := strconv.Atoi(os.Getenv("FENCEGATE_BENCH_RATE")); err == nil && n > 0 {
		rate = n
	}
	direct := func(r int) string { return fmt.Sprintf("%s/bench/p%d", fast.URL, r) }
	fmt.Fprintf(out, "\n== latency at %d req/s for %v each (vegeta), 0 ms upstream\n", rate, d)
	fmt.Fprintf(out, "%-20s %10s %10s %10s %10s %8s\n", "target", "p50", "p99", "+p50", "+p99", "non-2xx")
	var base vegeta.Metrics
	for i, t := range []struct {
		name string
		url  func(n int) string
	}{
		{"direct", direct},
		{"local", func(n int) string { return url(local, n%pairResources) }},
		{"shared (2 replicas)", func(n int) string { return url(rs[n%2].srv.URL, n%pairResources) }},
	} {
		m := attack(rate, d, t.url, func(n int) string { return tok(n % pairResources) })
		if i == 0 {
			base = m
		}
		fmt.Fprintf(out, "%-20s %10s %10s %10s %10s %8d\n", t.name, m.Latencies.P50.Round(time.Microsecond), m.Latencies.P99.Round(time.Microsecond),
			(m.Latencies.P50 - base.Latencies.P50).Round(time.Microsecond), (m.Latencies.P99 - base.Latencies.P99).Round(time.Microsecond), nonOK(m))
		b.ReportMetric(float64(m.Latencies.P50.Microseconds()), strings.Fields(t.name)[0]+"_p50_us")
		b.ReportMetric(float64(m.Latencies.P99.Microseconds()), strings.Fields(t.name)[0]+"_p99_us")
	}
	fmt.Fprintln(out)
}

// pairLeases acquires one lease per resource from the coordinator's
// records in the shared database (the acquisition raises each fence row)
// and returns their tokens.
func pairLeases(b *testing.B, dbURL string) []int64 {
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ls := postgres.NewLeases(st)
	ls.RaiseFence = true
	tokens := make([]int64, pairResources)
	for r := range tokens {
		l, _, err := ls.Acquire(context.Background(), fmt.Sprintf("/bench/p%d", r), fmt.Sprintf("worker-%d", r), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		tokens[r] = l.Token
	}
	return tokens
}

// pairWarm writes every resource once with its token through each gateway
// (advances and drains are not what the rounds measure).
func pairWarm(b *testing.B, bases []string, url func(string, int) string, tok func(int) string) {
	for r := range pairResources {
		for _, base := range bases {
			mustPut(b, url(base, r), tok(r))
		}
	}
}

// sampleConns records the most connections of each application name in
// pg_stat_activity every 200 ms until the returned function is called.
func sampleConns(conn *pgx.Conn, apps []string, most []int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for i, app := range apps {
				var n int
				if conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n) == nil {
					most[i] = max(most[i], n)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// attack sends PUTs at a constant rate for d, the n-th to url(n) with
// token(n), and returns vegeta's metrics.
func attack(rate int, d time.Duration, url func(n int) string, token func(n int) string) vegeta.Metrics {
	var n atomic.Int64
	targeter := func(t *vegeta.Target) error {
		i := int(n.Add(1))
		*t = vegeta.Target{Method: "PUT", URL: url(i), Body: []byte("v"),
			Header: http.Header{"Fencing-Token": []string{token(i)}}}
		return nil
	}
	a := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Connections(256))
	var m vegeta.Metrics
	for r := range a.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, d, "bench") {
		m.Add(r)
	}
	m.Close()
	return m
}

func nonOK(m vegeta.Metrics) int {
	n := 0
	for code, c := range m.StatusCodes {
		if code != "200" {
			n += c
		}
	}
	return n
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fmtAll(xs []float64, f string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(parts, " ")
}
