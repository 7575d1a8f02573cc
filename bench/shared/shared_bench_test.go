// Package shared benchmarks fence mode "shared": writes per second with a
// repeated token through two gateway replicas over one PostgreSQL, the
// database round trips per write, and pgbench running the same statements
// against the same database in the same run. bench/shared.sh runs it.
package shared

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/bench/cpustat"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

const resources = 1000

// clients is the number of concurrent writers, for the gateways and for
// pgbench alike. FENCEGATE_BENCH_CLIENTS overrides it.
func clients() int {
	if n, err := strconv.Atoi(os.Getenv("FENCEGATE_BENCH_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 16
}

// replica is one gateway with its own pool, as one process would have.
type replica struct {
	fence  *postgres.SharedFence
	srv    *httptest.Server
	routes []*gateway.Route
}

func newReplica(b *testing.B, dbURL, upstream string) *replica {
	return newReplicaNamed(b, dbURL, upstream, "")
}

// newReplicaNamed is newReplica with an application_name, so its database
// connections can be counted in pg_stat_activity.
func newReplicaNamed(b *testing.B, dbURL, upstream, app string) *replica {
	if app != "" {
		dbURL += "&application_name=" + app
	}
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf(`
gateway:
  routes:
    - name: bench
      match: {path_prefix: /bench/}
      upstream: {url: %q, timeout: 30s, keep_alive_writes: %t}
      resource: "{path}"
store:
  postgres: {url: %q}
fence: {mode: shared, verify_tokens: false, max_advance: -1}
`, upstream, keepAlive(), dbURL)))
	if err != nil {
		b.Fatal(err)
	}
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{MaxConns: cfg.Store.Postgres.MaxConns, Timeout: cfg.Store.Postgres.Timeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	markerConns := cfg.Fence.MarkerConns
	if n, err := strconv.Atoi(os.Getenv("FENCEGATE_BENCH_MARKER_CONNS")); err == nil && n > 0 {
		markerConns = n
	}
	// FENCEGATE_BENCH_MARKER_LINGER (a Go duration; negative: none)
	// overrides the marker sessions' linger, to compare.
	linger, _ := time.ParseDuration(os.Getenv("FENCEGATE_BENCH_MARKER_LINGER"))
	f := postgres.NewSharedFence(st, postgres.SharedFenceOptions{ForwardTimeout: 30 * time.Second, MarkerConns: markerConns, MarkerLinger: linger, Logger: log})
	b.Cleanup(func() { f.Close() })
	srv, routes := serveFence(b, f, cfg, log)
	return &replica{fence: f, srv: srv, routes: routes}
}

// BenchmarkSharedRepeatedToken: PUTs with the token already accepted, to
// 1,000 resources at random (writePath), each through one of two replicas,
// after a 2 s warm-up (warmUp).
func BenchmarkSharedRepeatedToken(b *testing.B) {
	pg := testenv.Postgres(b)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(up.Close)
	rs := []*replica{newReplica(b, pg.URL, up.URL), newReplica(b, pg.URL, up.URL)}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	put := func(url string) error {
		req, _ := http.NewRequest("PUT", url, strings.NewReader("v"))
		req.Header.Set("Fencing-Token", "1")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %d", url, resp.StatusCode)
		}
		return nil
	}
	for i := range resources { // every resource exists at token 1
		if err := put(fmt.Sprintf("%s/bench/%d", rs[i%2].srv.URL, i)); err != nil {
			b.Fatal(err)
		}
	}

	n := clients()
	per := (b.N + n - 1) / n
	writes := per * n
	// pgbench runs before and after the gateways and the mean is the limit,
	// so load on the machine that changes during the run hits both sides.
	path := writePath(resources)
	shared := func(c, i int) string { return fmt.Sprintf("%s/bench/%d", rs[path(c, i)%2].srv.URL, path(c, i)) }
	c0 := cpustat.Now()
	tpsBefore, perr := pgbench(b, pg.URL, n, 5*time.Second)
	pgCPU := c0.To(cpustat.Now(), tpsBefore*5)
	warmUp(n, shared, func(int, int) string { return "1" })
	rt0 := rs[0].fence.RoundTrips() + rs[1].fence.RoundTrips()
	wt0 := rs[0].fence.WaitedRoundTrips() + rs[1].fence.WaitedRoundTrips()
	b.ResetTimer()
	stop := profilePhase(b, "shared")
	c1 := cpustat.Now()
	elapsed, err := writers(n, per, shared, put)
	gwCPU := c1.To(cpustat.Now(), float64(writes))
	stop()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rtPerWrite := float64(rs[0].fence.RoundTrips()+rs[1].fence.RoundTrips()-rt0) / float64(writes)
	waitedPerWrite := float64(rs[0].fence.WaitedRoundTrips()+rs[1].fence.WaitedRoundTrips()-wt0) / float64(writes)
	wps := float64(writes) / elapsed.Seconds()
	b.ReportMetric(wps, "writes/s")
	b.ReportMetric(rtPerWrite, "roundtrips/write")
	b.ReportMetric(waitedPerWrite, "waited_roundtrips/write")
	// Where the CPU went: this process (load generator, both replicas,
	// upstream) and the rest of the machine (PostgreSQL, other users).
	b.ReportMetric(gwCPU.SelfUS, "go_cpu_us/write")
	b.ReportMetric(gwCPU.OtherUS, "other_cpu_us/write")
	b.ReportMetric(gwCPU.BusyCores, "busy_cores")
	b.ReportMetric(pgCPU.SelfUS+pgCPU.OtherUS, "pgbench_cpu_us/tx")

	// The ceiling of any fence with this load generator on this machine:
	// the same client, two gateways and upstream with a fence that admits
	// everything without I/O.
	open := []*httptest.Server{}
	for range 2 {
		gw := gateway.New(openFence{}, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		gw.SetRoutes(rs[0].routes)
		srv := httptest.NewServer(gw)
		b.Cleanup(srv.Close)
		open = append(open, srv)
	}
	c2 := cpustat.Now()
	openElapsed, err := writers(n, per, func(c, i int) string {
		return fmt.Sprintf("%s/bench/%d", open[path(c, i)%2].URL, path(c, i))
	}, put)
	openCPU := c2.To(cpustat.Now(), float64(writes))
	if err != nil {
		b.Fatal(err)
	}
	openWPS := float64(writes) / openElapsed.Seconds()
	b.ReportMetric(openWPS, "nofence_writes/s")
	b.ReportMetric(openCPU.SelfUS, "nofence_go_cpu_us/write")

	// The database's own limit for the same statements, same database,
	// same machine, same run: pgbench with the marker (try-lock and
	// re-read) as one pipeline and the unlock after it.
	tpsAfter, err := pgbench(b, pg.URL, n, 5*time.Second)
	if err == nil {
		err = perr
	}
	if err != nil {
		b.Logf("pgbench: %v (no ratio reported)", err)
		return
	}
	tps := (tpsBefore + tpsAfter) / 2
	b.ReportMetric(tps, "pgbench_tps")
	b.ReportMetric(100*wps/tps, "%_of_pgbench")
	b.ReportMetric(100*wps/openWPS, "%_of_nofence")
}

// writers runs n writers of per writes each, writer c's i-th write to
// url(c, i), and returns how long they took and the first error.
func writers(n, per int, url func(c, i int) string, put func(string) error) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	for c := range n {
		wg.Go(func() {
			for i := range per {
				if err := put(url(c, i)); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// pgbenchScript is the marker of SharedFence for a pipeline that carries a
// single write (markerTrySQL, markerReadSQL, then markerUnlockSQL after the
// write) as pgbench runs it, one client per session; the fence carries
// every write queued meanwhile in one pipeline, and keeps hot markers.
const pgbenchScript = `\set r random(0, 999)
\startpipeline
SELECT k, pg_try_advisory_lock_shared(k) FROM unnest(ARRAY[hashtext('/bench/' || :r::int)::bigint]) AS u(k);
SELECT resource, highest, ready FROM fence WHERE resource = ANY(ARRAY['/bench/' || :r::int]);
\endpipeline
SELECT pg_advisory_unlock_shared(k) FROM unnest(ARRAY[hashtext('/bench/' || :r::int)::bigint]) AS u(k);
`

func pgbench(b *testing.B, url string, clients int, d time.Duration) (float64, error) {
	return pgbenchRun(b, url, pgbenchScript, clients, d)
}

func pgbenchRun(b *testing.B, url, scriptText string, clients int, d time.Duration) (float64, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		return 0, err
	}
	script := filepath.Join(b.TempDir(), "script.sql")
	if err := os.WriteFile(script, []byte(scriptText), 0o644); err != nil {
		return 0, err
	}
	cmd := exec.Command(bin, "-n", "-M", "extended", "-f", script,
		"-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(int(d.Seconds())), url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	m := regexp.MustCompile(`tps = ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench output: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// serveFence serves cfg's routes on f, once f is ready, for the rest of b.
func serveFence(b *testing.B, f interface {
	gateway.Fence
	Ready(context.Context) error
}, cfg *config.Config, log *slog.Logger) (*httptest.Server, []*gateway.Route) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Ready(ctx); err != nil {
		b.Fatal(err)
	}
	routes, err := server.BuildRoutes(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	gw := gateway.New(f, gateway.Options{Logger: log})
	gw.SetRoutes(routes)
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	return srv, routes
}
