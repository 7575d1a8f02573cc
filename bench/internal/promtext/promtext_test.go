package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestSum: a page written by client_golang's registry, served by promhttp
// as etcd serves its own: sums by label, a histogram's _sum and _count, a
// summary's, an unlabelled gauge; a filter on a label the metric lacks or
// a value it never had matches nothing. Every figure differs from the sum
// without its filter, so a Sum that dropped a label would fail here.
func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_handled_total"}, []string{"grpc_code", "grpc_method", "grpc_service"})
	fsync := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "etcd_disk_wal_fsync_duration_seconds", Buckets: []float64{0.001, 1, 2}})
	apply := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "apply_duration_seconds"}, []string{"op"})
	lat := prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "latency_seconds", Objectives: map[float64]float64{0.5: 0.05}}, []string{"op"})
	rss := prometheus.NewGauge(prometheus.GaugeOpts{Name: "process_resident_memory_bytes"})
	reg.MustRegister(calls, fsync, apply, lat, rss)
	calls.WithLabelValues("OK", "Put", "etcdserverpb.KV").Add(3)
	calls.WithLabelValues("Unavailable", "Put", "etcdserverpb.KV").Add(2)
	calls.WithLabelValues("OK", "Range", "etcdserverpb.KV").Add(5)
	calls.WithLabelValues("OK", "LeaseKeepAlive", "etcdserverpb.Lease").Add(7)
	for _, v := range []float64{0.5, 1.5, 3} {
		fsync.Observe(v)
	}
	apply.WithLabelValues("put").Observe(1)
	apply.WithLabelValues("put").Observe(1)
	apply.WithLabelValues("range").Observe(10)
	lat.WithLabelValues("put").Observe(4)
	lat.WithLabelValues("range").Observe(6)
	lat.WithLabelValues("range").Observe(8)
	rss.Set(123456789)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	p, err := Get(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		match []string
		want  float64
		found bool
	}{
		{"grpc_server_handled_total", nil, 17, true},
		{"grpc_server_handled_total", []string{"grpc_method", "Put"}, 5, true},
		{"grpc_server_handled_total", []string{"grpc_method", "Put", "grpc_code", "OK"}, 3, true},
		{"grpc_server_handled_total", []string{"grpc_code", "OK"}, 15, true},
		{"grpc_server_handled_total", []string{"grpc_service", "etcdserverpb.Lease"}, 7, true},
		{"grpc_server_handled_total", []string{"grpc_method", "Txn"}, 0, false},
		{"grpc_server_handled_total", []string{"op", "put"}, 0, false},
		{"etcd_disk_wal_fsync_duration_seconds_count", nil, 3, true},
		{"etcd_disk_wal_fsync_duration_seconds_sum", nil, 5, true},
		{"etcd_disk_wal_fsync_duration_seconds_bucket", []string{"le", "1"}, 1, true},
		{"etcd_disk_wal_fsync_duration_seconds_bucket", []string{"le", "+Inf"}, 3, true},
		{"etcd_disk_wal_fsync_duration_seconds", nil, 0, false},
		{"apply_duration_seconds_count", []string{"op", "put"}, 2, true},
		{"apply_duration_seconds_sum", []string{"op", "put"}, 2, true},
		{"apply_duration_seconds_count", []string{"op", "range"}, 1, true},
		{"apply_duration_seconds_sum", []string{"op", "range"}, 10, true},
		{"apply_duration_seconds_sum", nil, 12, true},
		{"latency_seconds_count", []string{"op", "range"}, 2, true},
		{"latency_seconds_sum", []string{"op", "range"}, 14, true},
		{"latency_seconds", []string{"op", "put", "quantile", "0.5"}, 4, true},
		{"process_resident_memory_bytes", nil, 123456789, true},
		{"process_resident_memory_bytes", []string{"job", "etcd"}, 0, false},
		{"process_virtual_memory_bytes", nil, 0, false},
	} {
		t.Run(fmt.Sprintf("%s%q", tc.name, tc.match), func(t *testing.T) {
			if got, found := p.Sum(tc.name, tc.match...); got != tc.want || found != tc.found {
				t.Fatalf("Sum = %v, %t; want %v, %t", got, found, tc.want, tc.found)
			}
		})
	}
	checkLines(t, srv.URL, p)
}

// TestGetRefuses: a page that is not one (an error status, or text
// that is no exposition) is an error naming the URL, not an empty page.
func TestGetRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"status", http.StatusServiceUnavailable, "# TYPE x counter\nx 1\n"},
		{"not a page", http.StatusOK, "<html>metrics</html>\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			if p, err := Get(context.Background(), nil, srv.URL+"/metrics"); err == nil || !strings.Contains(err.Error(), srv.URL+"/metrics") {
				t.Fatalf("Get = %v, %v; want an error naming the URL", p, err)
			}
		})
	}
}

// TestKeyEscapes: a label value with a quote, a backslash and a newline
// keeps them through the parser, and Key writes it back as the page did.
func TestKeyEscapes(t *testing.T) {
	page := "# TYPE x_total counter\nx_total{a=\"q\\\"b\\\\n\\n\",b=\"\"} 2\nx_total{a=\"plain\"} 1\n"
	p, err := Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	s := p.Samples()
	if len(s) != 2 || s[0].Label("a") != "q\"b\\n\n" || s[0].Key() != `x_total{a="q\"b\\n\n",b=""}` || s[1].Key() != `x_total{a="plain"}` {
		t.Fatalf("samples %+v, keys %q", s, keys(s))
	}
	if got, _ := p.Sum("x_total", "a", "q\"b\\n\n"); got != 2 {
		t.Fatalf("Sum by the escaped value = %v; want 2", got)
	}
}

// TestEtcdPage reads a real etcd member's page: a put counts in its gRPC
// calls by method and code, its raft proposals and its WAL fsyncs
// (a histogram's _count, whose _sum grows too), and every sample's Key is
// the line etcd wrote, which the benchmarks print.
func TestEtcdPage(t *testing.T) {
	c := testenv.Etcd(t, 1)
	cli, err := clientv3.New(c.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	if _, err := cli.Put(ctx, "warm", "x"); err != nil {
		t.Fatal(err)
	}
	url := c.MetricsURLs[0] + "/metrics"
	before, err := Get(ctx, nil, url)
	if err != nil {
		t.Fatal(err)
	}
	const puts = 7
	for i := range puts {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Get(ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	after, err := Get(ctx, nil, url)
	if err != nil {
		t.Fatal(err)
	}
	delta := func(name string, match ...string) float64 {
		a, _ := before.Sum(name, match...)
		b, ok := after.Sum(name, match...)
		if !ok {
			t.Fatalf("etcd's page has no %s%q", name, match)
		}
		return b - a
	}
	if got := delta("grpc_server_handled_total", "grpc_method", "Put", "grpc_code", "OK"); got != puts {
		t.Errorf("Put calls handled: %v; want %d", got, puts)
	}
	if got := delta("grpc_server_handled_total", "grpc_method", "Range"); got != 1 {
		t.Errorf("Range calls handled: %v; want 1", got)
	}
	if got := delta("etcd_server_proposals_committed_total"); got < puts {
		t.Errorf("proposals committed: %v; want >= %d", got, puts)
	}
	if got := delta("etcd_disk_wal_fsync_duration_seconds_count"); got < puts {
		t.Errorf("WAL fsyncs: %v; want >= %d", got, puts)
	}
	if got := delta("etcd_disk_wal_fsync_duration_seconds_sum"); got <= 0 {
		t.Errorf("WAL fsync seconds: %v; want > 0", got)
	}
	checkLines(t, url, after)
}

// checkLines: the samples of p are the sample lines of the page at url,
// one for one, each line its sample's Key and a value (the page is read
// again: counters may have grown).
func checkLines(t *testing.T, url string, p *Page) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	lines := make(map[string]bool)
	for l := range strings.Lines(string(body)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines[l[:strings.LastIndexByte(l, ' ')]] = true
		}
	}
	if len(lines) != len(p.Samples()) {
		t.Errorf("%d sample lines on the page, %d samples parsed", len(lines), len(p.Samples()))
	}
	for _, k := range keys(p.Samples()) {
		if !lines[k] {
			t.Errorf("sample %s: no such line on the page", k)
		}
	}
}

func keys(s []Sample) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.Key()
	}
	return out
}
