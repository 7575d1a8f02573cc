package shared

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/bench/cpustat"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// storeSide is one store's two shared replicas in BenchmarkSharedStores.
type storeSide struct {
	name string
	urls [2]string
	// requests is what both replicas asked of their store so far (round
	// trips on PostgreSQL, requests on etcd).
	requests func() int64
	// cpu is the CPU time the store's own processes used so far.
	cpu func() time.Duration
	// counters are the store's own counts of its work (statements; raft
	// proposals, gRPC calls), by name.
	counters func() map[string]float64
}

// phaseUse is what one phase of BenchmarkSharedStores did and used, per
// write where it says so.
type phaseUse struct {
	ok, bad  int64
	el       time.Duration
	goUS     float64 // this process (load, upstream, gateways, store clients)
	storeUS  float64 // the active store's processes
	rest     float64 // cores: the machine less this process and both stores
	requests float64
	counters map[string]float64
}

func (u phaseUse) wps() float64 { return float64(u.ok) / u.el.Seconds() }

// measure drives clients writers for d and measures the phase: the
// counters and CPU of side (nil: the local gateway), and the rest of the
// machine less every store's processes (the other jobs).
func measure(clients int, d time.Duration, url, token func(c, i int) string, side *storeSide, all []*storeSide) phaseUse {
	cpu0 := make([]time.Duration, len(all))
	for i, s := range all {
		cpu0[i] = s.cpu()
	}
	var req0 int64
	var n0 map[string]float64
	if side != nil {
		req0, n0 = side.requests(), side.counters()
	}
	c0 := cpustat.Now()
	ok, bad, el := driveLabeled(clients, d, url, token)
	c1 := cpustat.Now()
	u := phaseUse{ok: ok, bad: bad, el: el}
	writes := float64(ok + bad)
	self, other := cores(c0, c1, el)
	u.goUS = self * el.Seconds() * 1e6 / writes
	u.rest = other
	for i, s := range all {
		used := s.cpu() - cpu0[i]
		u.rest -= float64(used) / float64(el)
		if s == side {
			u.storeUS = float64(used.Microseconds()) / writes
		}
	}
	if side != nil {
		u.requests = float64(side.requests()-req0) / writes
		u.counters = map[string]float64{}
		for k, v := range side.counters() {
			u.counters[k] = (v - n0[k]) / writes
		}
	}
	return u
}

// pgSide is the PostgreSQL side: two replicas over pg, the postmaster's
// process tree's CPU, the statements of pg_stat_statements (every client
// of the database).
func pgSide(b *testing.B, pg *testenv.PG, conn *pgx.Conn, pm int, upstream string) *storeSide {
	rs := []*replica{newReplica(b, pg.URL, upstream), newReplica(b, pg.URL, upstream)}
	return &storeSide{
		name:     "pg",
		urls:     [2]string{rs[0].srv.URL, rs[1].srv.URL},
		requests: func() int64 { return rs[0].fence.RoundTrips() + rs[1].fence.RoundTrips() },
		cpu:      func() time.Duration { return treeCPU(pm) },
		counters: func() map[string]float64 {
			return map[string]float64{"statements": float64(statementCalls(b, conn))}
		},
	}
}

// etcdSide is the etcd side: two replicas over the cluster at endpoints
// whose members are pids.
func etcdSide(b *testing.B, endpoints []string, pids []int, upstream string) *storeSide {
	rs := []*etcdReplica{newEtcdReplica(b, endpoints, upstream), newEtcdReplica(b, endpoints, upstream)}
	return &storeSide{
		name:     "etcd",
		urls:     [2]string{rs[0].url, rs[1].url},
		requests: func() int64 { return rs[0].fence.Requests() + rs[1].fence.Requests() },
		cpu: func() time.Duration {
			var d time.Duration
			for _, c := range membersCPU(pids) {
				d += c
			}
			return d
		},
		counters: func() map[string]float64 {
			p, g := etcdCounters(b, endpoints)
			return map[string]float64{"proposals": p, "grpc_calls": g}
		},
	}
}

// setups are the two workloads of the side by side benchmarks: 0 ms
// upstream with 64 writers, 50 ms with 256.
var setups = []setup{{"0ms", 0, 64}, {"50ms", 50 * time.Millisecond, 256}}

type setup struct {
	name    string
	delay   time.Duration
	clients int
}

// start serves the setup's upstream and a local gateway to it, each
// labelled by side for the CPU profile.
func (s setup) start(b *testing.B) (upstream, local string) {
	upstream = labeled("upstream", func() string { return slowUpstream(b, s.delay) })
	return upstream, labeled("gateway", func() string { return localGateway(b, upstream) })
}

// pgStatements is a fresh database with pg_stat_statements, and a
// connection to it (closed with b).
func pgStatements(b *testing.B) (*testenv.PG, *pgx.Conn) {
	pg := testenv.Postgres(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		b.Fatalf("pg_stat_statements (internal/testenv preloads it): %v", err)
	}
	return pg, conn
}

// statementCalls is how many statements the database of conn ran so far
// (pg_stat_statements, every client), less those that read the view.
func statementCalls(b *testing.B, conn *pgx.Conn) int64 {
	var calls int64
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat_statements%'`).Scan(&calls); err != nil {
		b.Fatal(err)
	}
	return calls
}

// postmasterPID is the PID of conn's server (the first line of its data
// directory's postmaster.pid); 0, and the CPU figures read 0, if it cannot
// be read (a DATABASE_URL server elsewhere).
func postmasterPID(b *testing.B, conn *pgx.Conn) int {
	var dir string
	if err := conn.QueryRow(context.Background(), `SELECT setting FROM pg_settings WHERE name = 'data_directory'`).Scan(&dir); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		b.Logf("postmaster.pid: %v (PostgreSQL's CPU not measured)", err)
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// putAll writes each of urls with token 1, n at a time, and fails b
// unless every one is answered 200.
func putAll(b *testing.B, urls []string, n int) {
	next := make(chan string)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for url := range next {
				if err := put(url, "1"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for _, url := range urls {
		select {
		case next <- url:
		case err := <-errs:
			close(next)
			wg.Wait()
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSharedStores (BENCH=Stores), side by side in one run: one local
// gateway, two shared replicas on PostgreSQL and two on a three-member
// etcd cluster, on the same workload (repeated tokens over 1,000
// resources, writePath, each shared side warmed 2 s just before its
// phase) at 0 ms (64 writers) and 50 ms (256 writers): writes/s, the
// ratio to the local gateway (the mean of its phases before and after),
// store requests and the store's own counts per write, and the CPU per
// write of this process and of the store's processes (the postmaster and
// its backends; the etcd members); then advances (a new token per write,
// clients() writers) on each store: writes/s, p50, p99.
func BenchmarkSharedStores(b *testing.B) {
	d := seconds()
	pg, conn := pgStatements(b)
	pm := postmasterPID(b, conn)
	etcd := testenv.Etcd(b, 3)
	pids := etcdPIDs(etcd.Endpoints)
	path := writePath(resources)
	token := func(int, int) string { return "1" }
	report := func(name string, v float64) { b.ReportMetric(v, name) }
	fmt.Printf("\n%-5s %-6s %9s %7s %9s %-34s %8s %9s %6s %7s\n", "", "side", "writes/s", "ratio", "req/write", "store counts/write", "go_us/w", "store_us/w", "rest", "non2xx")
	for _, tc := range setups {
		up, local := tc.start(b)
		sides := []*storeSide{
			labeled("gateway", func() *storeSide { return pgSide(b, pg, conn, pm, up) }),
			labeled("gateway", func() *storeSide { return etcdSide(b, etcd.Endpoints, pids, up) }),
		}
		// Every resource at token 1 through each gateway, 64 at a time (one
		// at a time takes 150 s at 50 ms).
		var urls []string
		for i := range resources {
			urls = append(urls, fmt.Sprintf("%s/bench/%d", local, i))
			for _, s := range sides {
				urls = append(urls, fmt.Sprintf("%s/bench/%d", s.urls[i%2], i))
			}
		}
		putAll(b, urls, 64)
		localURL := func(c, i int) string { return fmt.Sprintf("%s/bench/%d", local, path(c, i)) }
		l1 := measure(tc.clients, d, localURL, token, nil, sides)
		var shared []phaseUse
		for _, s := range sides {
			url := func(c, i int) string { return fmt.Sprintf("%s/bench/%d", s.urls[path(c, i)%2], path(c, i)) }
			warmUp(tc.clients, url, token)
			shared = append(shared, measure(tc.clients, d, url, token, s, sides))
		}
		l2 := measure(tc.clients, d, localURL, token, nil, sides)
		localWPS := (l1.wps() + l2.wps()) / 2
		p := tc.name + "_"
		report(p+"local_writes/s", localWPS)
		report(p+"local_go_us/write", (l1.goUS+l2.goUS)/2)
		report(p+"local_rest_cores", (l1.rest+l2.rest)/2)
		report(p+"local_non2xx", float64(l1.bad+l2.bad))
		fmt.Printf("%-5s %-6s %9.0f %7s %9s %-34s %8.0f %9s %6.2f %7d\n", tc.name, "local", localWPS, "", "", "", (l1.goUS+l2.goUS)/2, "", (l1.rest+l2.rest)/2, l1.bad+l2.bad)
		for i, s := range sides {
			u := shared[i]
			q := p + s.name + "_"
			report(q+"writes/s", u.wps())
			report(q+"%_of_local", 100*u.wps()/localWPS)
			report(q+"requests/write", u.requests)
			var counts []string
			for k, v := range u.counters {
				report(q+k+"/write", v)
				counts = append(counts, fmt.Sprintf("%s %.3f", k, v))
			}
			report(q+"go_us/write", u.goUS)
			report(q+"store_us/write", u.storeUS)
			report(q+"rest_cores", u.rest)
			report(q+"non2xx", float64(u.bad))
			slices.Sort(counts)
			fmt.Printf("%-5s %-6s %9.0f %6.1f%% %9.3f %-34s %8.0f %9.0f %6.2f %7d\n", tc.name, s.name, u.wps(), 100*u.wps()/localWPS, u.requests, strings.Join(counts, ", "), u.goUS, u.storeUS, u.rest, u.bad)
		}
	}

	// Advances: each client its own resource, token i+1 on its i-th write,
	// through the replicas in turn.
	up := slowUpstream(b, 0)
	sides := []*storeSide{pgSide(b, pg, conn, pm, up), etcdSide(b, etcd.Endpoints, pids, up)}
	for _, s := range sides {
		req0, cpu0 := s.requests(), s.cpu()
		lat, ok, bad, el := driveLatency(clients(), d, func(c, i int) string { return fmt.Sprintf("%s/bench/adv-%d", s.urls[i%2], c) }, func(_, i int) string { return strconv.Itoa(i + 1) })
		writes := float64(ok + bad)
		q := "advance_" + s.name + "_"
		p50, p99 := float64(lat[len(lat)/2].Microseconds())/1000, float64(lat[len(lat)*99/100].Microseconds())/1000
		report(q+"writes/s", float64(ok)/el.Seconds())
		report(q+"non2xx", float64(bad))
		report(q+"requests/write", float64(s.requests()-req0)/writes)
		report(q+"store_us/write", float64((s.cpu()-cpu0).Microseconds())/writes)
		report(q+"p50_ms", p50)
		report(q+"p99_ms", p99)
		fmt.Printf("advance %-6s %7.0f writes/s, p50 %.1f ms, p99 %.1f ms, %.2f requests/write, %d non-2xx\n", s.name, float64(ok)/el.Seconds(), p50, p99, float64(s.requests()-req0)/writes, bad)
	}
}
