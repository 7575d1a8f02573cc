package shared

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
	"github.com/jackc/pgx/v5"
)

// seconds is how long each side of a comparison runs
// (FENCEGATE_BENCH_SECONDS, default 10).
func seconds() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("FENCEGATE_BENCH_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 10 * time.Second
}

// drive runs clients writers for d against url(c, i) with token(c, i) and
// counts the answers.
func drive(clients int, d time.Duration, url func(c, i int) string, token func(c, i int) string) (ok, bad int64, elapsed time.Duration) {
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var nOK, nBad atomic.Int64
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				req, _ := http.NewRequest("PUT", url(c, i), strings.NewReader("v"))
				req.Header.Set("Fencing-Token", token(c, i))
				resp, err := client.Do(req)
				if err != nil {
					nBad.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					nOK.Add(1)
				} else {
					nBad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return nOK.Load(), nBad.Load(), time.Since(start)
}

// localGateway is one gateway in fence mode local over the embedded store.
func localGateway(b *testing.B, upstream string) string {
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf(`
gateway:
  routes:
    - name: bench
      match: {path_prefix: /bench/}
      upstream: {url: %q, timeout: 30s, keep_alive_writes: %t}
      resource: "{path}"
`, upstream, keepAlive())))
	if err != nil {
		b.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(b.TempDir(), "fencegate.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	routes, err := server.BuildRoutes(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	gw := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: log})
	gw.SetRoutes(routes)
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	return srv.URL
}

// keepAlive is FENCEGATE_BENCH_KEEP_ALIVE=1: the routes keep their
// upstream connections open after writes (upstream.keep_alive_writes; the
// bench upstreams read every body), so the proxy's own cost per write is
// smaller and the fence's weighs more.
func keepAlive() bool { return os.Getenv("FENCEGATE_BENCH_KEEP_ALIVE") == "1" }

func slowUpstream(b *testing.B, d time.Duration) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(d)
	}))
	b.Cleanup(up.Close)
	return up.URL
}

// BenchmarkSharedSlowUpstream: a 50 ms upstream, 256 client connections,
// repeated tokens over 1,000 resources: two shared replicas together
// against one local gateway, in the same run (local, shared, local; the
// local figure is the mean), with the database connections of each
// replica sampled from pg_stat_activity during the shared run.
func BenchmarkSharedSlowUpstream(b *testing.B) {
	const clients = 256
	d := seconds()
	pg := testenv.Postgres(b)
	up := slowUpstream(b, 50*time.Millisecond)
	local := localGateway(b, up)
	rs := []*replica{newReplicaNamed(b, pg.URL, up, "bench_r1"), newReplicaNamed(b, pg.URL, up, "bench_r2")}
	warm(b, local, rs)
	path := writePath(resources)
	token := func(int, int) string { return "1" }
	shared := func(c, i int) string { return fmt.Sprintf("%s/bench/%d", rs[path(c, i)%2].srv.URL, path(c, i)) }
	b.ResetTimer()
	l1, lbad1, le1 := drive(clients, d, func(c, i int) string { return fmt.Sprintf("%s/bench/%d", local, path(c, i)) }, token)

	conn, err := pgx.Connect(context.Background(), pg.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var maxConns [2]int
	warmUp(clients, shared, token)
	stopSampling := sampleConns(conn, []string{"bench_r1", "bench_r2"}, maxConns[:])
	s, sbad, se := drive(clients, d, shared, token)
	stopSampling()
	l2, lbad2, le2 := drive(clients, d, func(c, i int) string { return fmt.Sprintf("%s/bench/%d", local, path(c, i)) }, token)
	b.StopTimer()
	localWPS := (float64(l1)/le1.Seconds() + float64(l2)/le2.Seconds()) / 2
	sharedWPS := float64(s) / se.Seconds()
	b.ReportMetric(localWPS, "local_writes/s")
	b.ReportMetric(sharedWPS, "shared_writes/s")
	b.ReportMetric(100*sharedWPS/localWPS, "%_of_local")
	b.ReportMetric(float64(sbad), "shared_non2xx")
	b.ReportMetric(float64(lbad1+lbad2), "local_non2xx")
	b.ReportMetric(float64(max(maxConns[0], maxConns[1])), "max_conns/replica")
}

// warm creates every resource at token 1 through each gateway.
func warm(b *testing.B, local string, rs []*replica) {
	for i := range resources {
		for _, base := range []string{local, rs[i%2].srv.URL} {
			mustPut(b, fmt.Sprintf("%s/bench/%d", base, i), "1")
		}
	}
}

// mustPut writes url with token and fails b unless it is answered 200.
func mustPut(b *testing.B, url, token string) {
	if err := put(url, token); err != nil {
		b.Fatal(err)
	}
}

// put writes url with token; an error unless it is answered 200.
func put(url, token string) error {
	req, _ := http.NewRequest("PUT", url, strings.NewReader("v"))
	req.Header.Set("Fencing-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("warm-up %s: %d", url, resp.StatusCode)
	}
	return nil
}

// BenchmarkSharedAdvance: every write advances its resource's fence (each
// client its own resource, token i+1 on its i-th write) through two shared
// replicas, 0 ms upstream: writes/s and database round trips per write.
func BenchmarkSharedAdvance(b *testing.B) {
	n := clients()
	d := seconds()
	pg := testenv.Postgres(b)
	up := slowUpstream(b, 0)
	rs := []*replica{newReplica(b, pg.URL, up), newReplica(b, pg.URL, up)}
	rt0 := rs[0].fence.RoundTrips() + rs[1].fence.RoundTrips()
	wt0 := rs[0].fence.WaitedRoundTrips() + rs[1].fence.WaitedRoundTrips()
	b.ResetTimer()
	ok, bad, el := drive(n, d, func(c, i int) string { return fmt.Sprintf("%s/bench/adv-%d", rs[i%2].srv.URL, c) }, func(_, i int) string { return strconv.Itoa(i + 1) })
	b.StopTimer()
	writes := float64(ok + bad)
	b.ReportMetric(float64(ok)/el.Seconds(), "writes/s")
	b.ReportMetric(float64(bad), "non2xx")
	b.ReportMetric(float64(rs[0].fence.RoundTrips()+rs[1].fence.RoundTrips()-rt0)/writes, "roundtrips/write")
	b.ReportMetric(float64(rs[0].fence.WaitedRoundTrips()+rs[1].fence.WaitedRoundTrips()-wt0)/writes, "waited_roundtrips/write")
}
