package shared

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/bench/internal/promtext"
)

// etcdPIDs finds the process of each member of endpoints: the one whose
// command line listens on that client URL. A member not found is 0 (its
// CPU then reads 0: the figure says so rather than fail the benchmark).
func etcdPIDs(endpoints []string) []int {
	pids := make([]int, len(endpoints))
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a != "--listen-client-urls" || i+1 >= len(args) {
				continue
			}
			if j := slices.Index(endpoints, args[i+1]); j >= 0 {
				pids[j], _ = strconv.Atoi(filepath.Base(filepath.Dir(d)))
			}
		}
	}
	return pids
}

// procCPU is the CPU time (user and system) process pid used so far, from
// /proc/pid/stat (USER_HZ = 100); 0 if it cannot be read.
func procCPU(pid int) time.Duration {
	st, _ := procStat(pid)
	return st.cpu
}

// stat is what procStat reads of a process: its parent, its CPU time
// (user and system) and that of its children it waited for.
type stat struct {
	ppid          int
	cpu, children time.Duration
}

// procStat reads /proc/pid/stat; false if it cannot.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, false
	}
	// The command name (field 2) may hold spaces: count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return stat{}, false
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	tick := 10 * time.Millisecond
	return stat{
		ppid:     int(n(1)),                         // field 4
		cpu:      time.Duration(n(11)+n(12)) * tick, // fields 14, 15
		children: time.Duration(n(13)+n(14)) * tick, // fields 16, 17
	}, true
}

// treeCPU is the CPU time process pid and its children used so far: its
// own, that of the children it waited for, and that of the live ones
// (PostgreSQL: the postmaster and its backends, whether they have exited
// or not). A grandchild counts only once its parent waited for it.
func treeCPU(pid int) time.Duration {
	root, ok := procStat(pid)
	if !ok {
		return 0
	}
	d := root.cpu + root.children
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		child, _ := strconv.Atoi(filepath.Base(dir))
		if st, ok := procStat(child); ok && st.ppid == pid {
			d += st.cpu
		}
	}
	return d
}

// membersCPU samples procCPU of each pid.
func membersCPU(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		out[i] = procCPU(p)
	}
	return out
}

// etcdMetrics sums, over the members, the counters of etcd's /metrics
// worth reading per write: gRPC calls handled by method, the MVCC
// operations and watch events, raft proposals, WAL fsyncs and the backend's
// commits. Keys are the metric lines without their value.
func etcdMetrics(b *testing.B, endpoints []string) map[string]float64 {
	want := []string{"grpc_server_handled_total{", "etcd_debugging_mvcc_", "etcd_mvcc_", "etcd_server_proposals_",
		"etcd_disk_wal_fsync_duration_seconds_count", "etcd_disk_backend_commit_duration_seconds_count",
		"etcd_server_read_indexes_failed_total", "etcd_server_slow_read_indexes_total", "etcd_server_leader_changes_seen_total",
		"etcd_server_heartbeat_send_failures_total", "etcd_server_slow_apply_total", "etcd_network_client_grpc_received_bytes_total", "etcd_network_client_grpc_sent_bytes_total"}
	m := make(map[string]float64)
	for _, ep := range endpoints {
		for _, s := range scrape(b, ep).Samples() {
			k := s.Key()
			if !slices.ContainsFunc(want, func(p string) bool { return strings.HasPrefix(k, p) }) {
				continue
			}
			if s.Name == "grpc_server_handled_total" {
				// Only the method and code: the service adds nothing here.
				k = "grpc " + s.Label("grpc_method") + " " + s.Label("grpc_code")
			}
			m[k] += s.Value
		}
	}
	return m
}

// scrape reads the page of the member at ep's /metrics.
func scrape(b *testing.B, ep string) *promtext.Page {
	p, err := promtext.Get(context.Background(), nil, ep+"/metrics")
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// logMetrics prints what grew from a to c, per write, by name (on stdout:
// a benchmark's log is cut to ten lines).
func logMetrics(phase string, a, c map[string]float64, writes float64) {
	type row struct {
		k string
		v float64
	}
	var rows []row
	for k, v := range c {
		if d := v - a[k]; d > 0 && !strings.Contains(k, "_bucket") && !strings.HasSuffix(k, "_sum") {
			rows = append(rows, row{k, d / writes})
		}
	}
	slices.SortFunc(rows, func(x, y row) int { return strings.Compare(x.k, y.k) })
	var sb strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&sb, "\n  %-70s %.4f", r.k, r.v)
	}
	fmt.Printf("%s: etcd counters per write (all members):%s\n", phase, sb.String())
}

// etcdProfiles takes a CPU profile of each member (etcd --enable-pprof)
// for d, into dir/etcd-<phase>-m<i>.out, and returns a wait for them.
func etcdProfiles(endpoints []string, dir, phase string, d time.Duration) func() {
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{}, len(endpoints))
	for i, ep := range endpoints {
		go func() {
			defer func() { done <- struct{}{} }()
			resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", ep, int(d.Seconds())))
			if err != nil {
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("etcd-%s-m%d.out", phase, i)))
			if err != nil {
				return
			}
			io.Copy(f, resp.Body)
			f.Close()
		}()
	}
	return func() {
		for range endpoints {
			<-done
		}
	}
}

// labeled runs fn with the pprof label side=side: the goroutines it starts
// (a server's connections, a client's, the etcd client's) carry it too, so
// a CPU profile of the benchmark splits by side (go tool pprof -tags): the
// load generator, the upstream, the gateways, the etcd clients' own
// goroutines.
func labeled[T any](side string, fn func() T) T {
	var v T
	pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) { v = fn() })
	return v
}

// driveLabeled is drive with the label side=load.
func driveLabeled(clients int, d time.Duration, url func(c, i int) string, token func(c, i int) string) (ok, bad int64, elapsed time.Duration) {
	type res struct {
		ok, bad int64
		el      time.Duration
	}
	r := labeled("load", func() res { ok, bad, el := drive(clients, d, url, token); return res{ok, bad, el} })
	return r.ok, r.bad, r.el
}
