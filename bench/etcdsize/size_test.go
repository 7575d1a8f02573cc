// Package etcdsize measures what shared fence records cost an etcd
// cluster: database size and the server's memory per million fences, what
// each superseded version costs until compaction, and what compaction and
// defragmentation give back (bench/etcdsize.sh; docs/operations.md,
// "etcd").
package etcdsize

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/bench/internal/promtext"
	"github.com/fencegate/fencegate/internal/testenv"
)

// keys is how many fence records to write: FENCEGATE_BENCH_KEYS, default
// 1,000,000.
func keys(b *testing.B) int {
	n := 1_000_000
	if s := os.Getenv("FENCEGATE_BENCH_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("FENCEGATE_BENCH_KEYS=%q: want a positive count", s)
		}
	}
	return n
}

// A fence record as the shared fence keeps one: <prefix>/f<resource> ->
// the highest token, in decimal. Resources are S3-like object keys.
func fenceKey(i int) string { return fmt.Sprintf("/fencegate/f/orders/%09d/invoice.json", i) }

func fenceValue(i, round int) string {
	return strconv.FormatInt(1_700_000_000_000+int64(i)*4+int64(round), 10)
}

// BenchmarkEtcdFenceSize writes N fence records into a one-member etcd
// (the size is per member: every member holds the whole database), then
// advances every fence once (a second version of each key), compacts and
// defragments, and reports per million fences:
//
//	db-MiB/M          database file after the first write of each fence
//	inuse-MiB/M       the part of it in use
//	rss-MiB/M         etcd's resident memory growth (its key index is in memory)
//	version-B         bytes per superseded version until compaction
//	compacted-MiB/M   in use after compaction of the history
//	defrag-MiB/M      file size after defragmentation
//
// It runs once whatever b.N (-benchtime 1x).
func BenchmarkEtcdFenceSize(b *testing.B) {
	n := keys(b)
	cluster := testenv.EtcdWith(b, 1, testenv.EtcdOptions{
		// Compaction by hand below, at known points.
		AutoCompaction: []string{"--auto-compaction-retention", "0"},
	})
	cli, err := clientv3.New(cluster.ClientConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	status := func() *clientv3.StatusResponse {
		st, err := cli.Status(ctx, cluster.Endpoints[0])
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	rss := func() float64 { return metric(b, cluster.MetricsURLs[0], "process_resident_memory_bytes") }
	perM := func(bytes int64) float64 { return float64(bytes) / (1 << 20) * 1e6 / float64(n) }

	st0, rss0 := status(), rss()
	start := time.Now()
	write(b, cli, n, 0)
	w1 := time.Since(start)
	st1, rss1 := status(), rss()
	write(b, cli, n, 1)
	st2 := status()
	if _, err := cli.Compact(ctx, st2.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		b.Fatal(err)
	}
	st3 := status()
	if _, err := cli.Defragment(ctx, cluster.Endpoints[0]); err != nil {
		b.Fatal(err)
	}
	st4, rss4 := status(), rss()
	if got, err := cli.Get(ctx, fenceKey(n-1)); err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != fenceValue(n-1, 1) {
		b.Fatalf("the last fence after compaction and defragmentation: %v %v; want %s", got, err, fenceValue(n-1, 1))
	}

	b.ReportMetric(perM(st1.DbSize-st0.DbSize), "db-MiB/M")
	b.ReportMetric(perM(st1.DbSizeInUse-st0.DbSizeInUse), "inuse-MiB/M")
	b.ReportMetric((rss1-rss0)/(1<<20)*1e6/float64(n), "rss-MiB/M")
	b.ReportMetric(float64(st2.DbSizeInUse-st1.DbSizeInUse)/float64(n), "version-B")
	b.ReportMetric(perM(st3.DbSizeInUse), "compacted-MiB/M")
	b.ReportMetric(perM(st4.DbSize), "defrag-MiB/M")
	b.ReportMetric(float64(n)/w1.Seconds(), "puts/s")
	b.Logf("%d fences: db %s (in use %s) after the first write in %s, rss %s; after a second version of each: in use %s; compacted: in use %s; defragmented: db %s, rss %s",
		n, mib(st1.DbSize), mib(st1.DbSizeInUse), w1.Round(time.Second), mib(int64(rss1)), mib(st2.DbSizeInUse), mib(st3.DbSizeInUse), mib(st4.DbSize), mib(int64(rss4)))
}

// write puts every fence of round in transactions of 128 puts (etcd's
// default --max-txn-ops), 8 at a time: the bytes per record are those of
// one put per transaction, the run takes a minute instead of an hour.
func write(b *testing.B, cli *clientv3.Client, n, round int) {
	const batch, workers = 128, 8
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	for range workers {
		wg.Go(func() {
			for first := range next {
				ops := make([]clientv3.Op, 0, batch)
				for i := first; i < min(first+batch, n); i++ {
					ops = append(ops, clientv3.OpPut(fenceKey(i), fenceValue(i, round)))
				}
				if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
					once.Do(func() { failed = err })
				}
			}
		})
	}
	for first := 0; first < n; first += batch {
		next <- first
	}
	close(next)
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
}

// metric reads one unlabelled gauge from the Prometheus text page at
// base/metrics.
func metric(b *testing.B, base, name string) float64 {
	p, err := promtext.Get(context.Background(), nil, base+"/metrics")
	if err != nil {
		b.Fatal(err)
	}
	v, ok := p.Sum(name)
	if !ok {
		b.Fatalf("%s/metrics: no %s", base, name)
	}
	return v
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
