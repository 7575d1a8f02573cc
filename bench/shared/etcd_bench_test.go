package shared

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/etcd"
	"github.com/fencegate/fencegate/bench/cpustat"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
)

// etcdReplica is one gateway replica on store.etcd, with its own client
// and lease, as one process would have.
type etcdReplica struct {
	fence *etcd.SharedFence
	url   string
}

func newEtcdReplica(b *testing.B, endpoints []string, upstream string) *etcdReplica {
	eps := make([]string, len(endpoints))
	for i, e := range endpoints {
		eps[i] = strconv.Quote(e)
	}
	cfg, err := config.Parse("bench.yaml", []byte(fmt.Sprintf(`
gateway:
  routes:
    - name: bench
      match: {path_prefix: /bench/}
      upstream: {url: %q, timeout: 30s, keep_alive_writes: %t}
      resource: "{path}"
      hierarchical: false
store:
  etcd: {endpoints: [%s]}
fence: {mode: shared, max_advance: -1}
`, upstream, keepAlive(), strings.Join(eps, ", "))))
	if err != nil {
		b.Fatal(err)
	}
	e := cfg.Store.Etcd
	st := labeled("etcdclient", func() *etcd.Store {
		st, oerr := etcd.OpenStore(etcd.StoreOptions{Client: etcd.ClientOptions{Endpoints: e.Endpoints}, Prefix: e.Prefix, Timeout: e.Timeout})
		err = oerr
		return st
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// FENCEGATE_BENCH_MARKER_IDLE (a Go duration) overrides how long an
	// idle marker lingers, to compare.
	idle, _ := time.ParseDuration(os.Getenv("FENCEGATE_BENCH_MARKER_IDLE"))
	// FENCEGATE_BENCH_MARKER_LINGER likewise (negative: none).
	linger, _ := time.ParseDuration(os.Getenv("FENCEGATE_BENCH_MARKER_LINGER"))
	f := labeled("etcdclient", func() *etcd.SharedFence {
		return etcd.NewSharedFence(st, etcd.SharedFenceOptions{LeaseTTL: e.LeaseTTL, ForwardTimeout: 31 * time.Second, MarkerIdle: idle, MarkerLinger: linger, Logger: log})
	})
	b.Cleanup(func() { f.Close() })
	srv := labeled("gateway", func() *httptest.Server { srv, _ := serveFence(b, f, cfg, log); return srv })
	return &etcdReplica{fence: f, url: srv.URL}
}

// etcdCounters sums, over the members, the metrics etcd keeps of the work
// it did: proposals committed (the leader's count, the largest) and gRPC
// calls handled (all members).
func etcdCounters(b *testing.B, endpoints []string) (proposals, calls float64) {
	for _, ep := range endpoints {
		p := scrape(b, ep)
		committed, _ := p.Sum("etcd_server_proposals_committed_total")
		handled, _ := p.Sum("grpc_server_handled_total")
		proposals, calls = max(proposals, committed), calls+handled
	}
	return proposals, calls
}

// BenchmarkSharedEtcd, side by side in one run on a three-member etcd
// cluster: two shared replicas against one local gateway (local, shared,
// local; the local figure is the mean) with repeated tokens at 0 ms (64
// writers) and 50 ms (256 writers), etcd requests per fenced write counted
// by the replicas and from etcd's own metrics (proposals committed, gRPC
// calls handled), and advances (a new token per write): writes/s, p50 and
// p99.
func BenchmarkSharedEtcd(b *testing.B) {
	d := seconds()
	// FENCEGATE_BENCH_ETCD_PPROF (a directory): the members serve
	// /debug/pprof and each takes a CPU profile of each shared phase.
	pprofDir := os.Getenv("FENCEGATE_BENCH_ETCD_PPROF")
	var o testenv.EtcdOptions
	if pprofDir != "" {
		o.AutoCompaction = append(slices.Clone(testenv.EtcdAutoCompaction), "--enable-pprof")
	}
	c := testenv.EtcdWith(b, 3, o)
	pids := etcdPIDs(c.Endpoints)
	eps, leader := c.Endpoints, etcdLeader(b, c.Endpoints)
	fmt.Printf("etcd leader: m%d\n", slices.Index(c.Endpoints, leader))
	if os.Getenv("FENCEGATE_BENCH_ETCD_LEADER") == "1" {
		// An experiment: the replicas send everything to the leader.
		eps = []string{leader}
	}
	for _, tc := range setups {
		up, local := tc.start(b)
		rs := []*etcdReplica{newEtcdReplica(b, eps, up), newEtcdReplica(b, eps, up)}
		for i := range resources {
			mustPut(b, fmt.Sprintf("%s/bench/%d", local, i), "1")
			mustPut(b, fmt.Sprintf("%s/bench/%d", rs[i%2].url, i), "1")
		}
		path := writePath(resources)
		token := func(int, int) string { return "1" }
		c0, m0 := cpustat.Now(), membersCPU(pids)
		stop := profilePhase(b, tc.name+"-local")
		l1, lbad1, le1 := driveLabeled(tc.clients, d, func(c, i int) string { return fmt.Sprintf("%s/bench/%d", local, path(c, i)) }, token)
		stop()
		shared := func(c, i int) string { return fmt.Sprintf("%s/bench/%d", rs[path(c, i)%2].url, path(c, i)) }
		warmUp(tc.clients, shared, token)
		req0 := rs[0].fence.Requests() + rs[1].fence.Requests()
		p0, g0 := etcdCounters(b, c.Endpoints)
		e0 := etcdMetrics(b, c.Endpoints)
		c1, m1 := cpustat.Now(), membersCPU(pids)
		stop = profilePhase(b, tc.name+"-shared")
		wait := etcdProfiles(c.Endpoints, pprofDir, tc.name, d)
		s, sbad, se := driveLabeled(tc.clients, d, shared, token)
		stop()
		c2, m2 := cpustat.Now(), membersCPU(pids)
		wait()
		p1, g1 := etcdCounters(b, c.Endpoints)
		logMetrics(tc.name, e0, etcdMetrics(b, c.Endpoints), float64(s+sbad))
		reqs := rs[0].fence.Requests() + rs[1].fence.Requests() - req0
		c3 := cpustat.Now()
		l2, lbad2, le2 := drive(tc.clients, d, func(c, i int) string { return fmt.Sprintf("%s/bench/%d", local, path(c, i)) }, token)
		c4 := cpustat.Now()
		localWPS := (float64(l1)/le1.Seconds() + float64(l2)/le2.Seconds()) / 2
		sharedWPS := float64(s) / se.Seconds()
		writes := float64(s + sbad)
		b.ReportMetric(localWPS, tc.name+"_local_writes/s")
		b.ReportMetric(sharedWPS, tc.name+"_etcd_writes/s")
		b.ReportMetric(100*sharedWPS/localWPS, tc.name+"_%_of_local")
		b.ReportMetric(float64(reqs)/writes, tc.name+"_requests/write")
		b.ReportMetric((p1-p0)/writes, tc.name+"_proposals/write")
		b.ReportMetric((g1-g0)/writes, tc.name+"_grpc_calls/write")
		b.ReportMetric(float64(sbad+lbad1+lbad2), tc.name+"_non2xx")
		// The load of each side: the cores this process used (load
		// generator, gateways, upstream) and the rest of the machine
		// (etcd's members, and whatever else runs on it).
		ls1, lo1 := cores(c0, c1, le1)
		ls2, lo2 := cores(c3, c4, le2)
		ss, so := cores(c1, c2, se)
		b.ReportMetric((ls1+ls2)/2, tc.name+"_local_go_cores")
		b.ReportMetric((lo1+lo2)/2, tc.name+"_local_other_cores")
		b.ReportMetric(ss, tc.name+"_etcd_go_cores")
		b.ReportMetric(so, tc.name+"_etcd_other_cores")
		// Per write, measured per side: this process in the local phase
		// (load generator, upstream, local gateway) and in the shared one
		// (the same plus two replicas and their etcd clients), and each
		// etcd member's own process (/proc/PID/stat).
		lw := float64(l1 + lbad1)
		b.ReportMetric(ls1*le1.Seconds()*1e6/lw, tc.name+"_local_go_us/write")
		b.ReportMetric(ss*se.Seconds()*1e6/writes, tc.name+"_etcd_go_us/write")
		var members time.Duration
		for i := range pids {
			members += m2[i] - m1[i]
			b.ReportMetric(float64(m2[i]-m1[i])/float64(se), fmt.Sprintf("%s_etcd_m%d_cores", tc.name, i))
			b.ReportMetric(float64((m1[i]-m0[i]).Microseconds())/lw, fmt.Sprintf("%s_local_m%d_us/write", tc.name, i))
		}
		b.ReportMetric(float64(members.Microseconds())/writes, tc.name+"_etcd_members_us/write")
		b.ReportMetric(so-float64(members)/float64(se), tc.name+"_etcd_rest_cores")
	}

	// Advances: each client its own resource, token i+1 on its i-th write.
	up := slowUpstream(b, 0)
	rs := []*etcdReplica{newEtcdReplica(b, c.Endpoints, up), newEtcdReplica(b, c.Endpoints, up)}
	n := clients()
	req0 := rs[0].fence.Requests() + rs[1].fence.Requests()
	lat, ok, bad, el := driveLatency(n, d, func(c, i int) string { return fmt.Sprintf("%s/bench/adv-%d", rs[i%2].url, c) }, func(_, i int) string { return strconv.Itoa(i + 1) })
	b.ReportMetric(float64(ok)/el.Seconds(), "advance_writes/s")
	b.ReportMetric(float64(bad), "advance_non2xx")
	b.ReportMetric(float64(rs[0].fence.Requests()+rs[1].fence.Requests()-req0)/float64(ok+bad), "advance_requests/write")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "advance_p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "advance_p99_ms")
}

// etcdLeader is the client URL of the cluster's leader.
func etcdLeader(b *testing.B, endpoints []string) string {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	for _, ep := range endpoints {
		st, err := cli.Status(context.Background(), ep)
		if err != nil {
			b.Fatal(err)
		}
		if st.Leader == st.Header.MemberId {
			return ep
		}
	}
	b.Fatal("no etcd leader")
	return ""
}

// cores is the CPU used from a to b, over wall: the cores this process
// used and those the rest of the machine used.
func cores(a, b cpustat.Sample, wall time.Duration) (self, other float64) {
	u := a.To(b, 1)
	return u.SelfUS / 1e6 / wall.Seconds(), u.OtherUS / 1e6 / wall.Seconds()
}

// driveLatency is drive, one request at a time per client, with each
// request's latency (sorted).
func driveLatency(clients int, d time.Duration, url func(c, i int) string, token func(c, i int) string) (lat []time.Duration, ok, bad int64, elapsed time.Duration) {
	var mu sync.Mutex
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			for i := 0; time.Now().Before(stop); i++ {
				req, _ := http.NewRequest("PUT", url(c, i), strings.NewReader("v"))
				req.Header.Set("Fencing-Token", token(c, i))
				t0 := time.Now()
				resp, err := client.Do(req)
				good := err == nil && resp.StatusCode/100 == 2
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				dt := time.Since(t0)
				mu.Lock()
				lat = append(lat, dt)
				if good {
					ok++
				} else {
					bad++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, ok, bad, time.Since(start)
}

// BenchmarkSharedEtcdSize: the etcd database's size per fence, from the
// members' own report (Status.DbSize) after 100,000 fences were written,
// compacted and defragmented; reported per million fences.
func BenchmarkSharedEtcdSize(b *testing.B) {
	const n, batch = 100_000, 100
	c := testenv.Etcd(b, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	size := func() int64 {
		resp, err := cli.Get(ctx, "/")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			b.Fatal(err)
		}
		var most int64
		for _, ep := range c.Endpoints {
			if _, err := cli.Defragment(ctx, ep); err != nil {
				b.Fatal(err)
			}
			st, err := cli.Status(ctx, ep)
			if err != nil {
				b.Fatal(err)
			}
			most = max(most, st.DbSize)
		}
		return most
	}
	before := size()
	// The records as the fence writes them (adapters/etcd/store.go), for
	// keys like a route's: /orders/<id>.
	val := `{"h":1234567,"r":true,"o":"worker-17","u":1765000000000}`
	for i := 0; i < n; i += batch {
		var ops []clientv3.Op
		for j := i; j < i+batch; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/fencegate/f/orders/%08d", j), val))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	after := size()
	per := float64(after-before) / n
	b.ReportMetric(per, "bytes/fence")
	b.ReportMetric(per*1e6/(1<<20), "MiB/million_fences")
}
