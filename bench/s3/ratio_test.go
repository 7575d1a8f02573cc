package s3bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// BenchmarkPutObjectRatio is the figure of docs/s3.md: PutObject through the
// gateway as a share of PutObject straight to VersityGW, measured in rounds
// that interleave the targets, so that load from other work on the machine
// falls on all of them alike:
//
//	go test ./bench/s3 -run '^$' -bench PutObjectRatio -benchtime 15x -count 1
//
// Each b.N iteration is one round: every target (direct, gateway,
// gateway-etag; the order rotates per round) writes the same number of
// objects with the same writers and the same SDK client type. The metrics
// are the median over rounds of each target's time per object and of
// direct/target in percent (100% = as fast as direct).
//
// Wall time is only a figure on an otherwise idle machine. Beside it, each
// target's CPU per object is measured: that of VersityGW, of the gateway
// process (none for direct) and of this process (the SDK clients), summed
// over the rounds (/proc/PID/task/*/schedstat and getrusage), and "-cpu-%" is direct's
// CPU per object over the target's: the share of direct's throughput the
// target reaches where the CPU is the limit, load from other work
// notwithstanding. "-vgw-cpu-µs/put" and "-gw-cpu-µs/put" split it: the
// part spent in VersityGW and in the gateway process (the rest is the
// clients').
//
// Both connection behaviours of VersityGW are measured: "close" is its
// default (every answer carries Connection: close, to direct clients and to
// the gateway alike, so both dial per request), "keepalive" runs it with
// --keep-alive (as AWS S3 behaves), where both reuse connections.
//
// S3BENCH_BEFORE=PATH adds the target "before": the plain route served by
// another fencegate binary (say one built from main), for before/after
// figures of a change in the same run:
//
//	(cd /path/to/main-checkout && go build -o /tmp/fencegate-before ./cmd/fencegate)
//	S3BENCH_BEFORE=/tmp/fencegate-before go test ./bench/s3 -run '^$' -bench PutObjectRatio -benchtime 9x
//
// S3BENCH_BEFORE_ENV="GOMAXPROCS=1 GOGC=400" runs that binary with those
// environment variables (the other gateways without): runtime settings
// compared in one run, with S3BENCH_BEFORE naming the same build.
func BenchmarkPutObjectRatio(b *testing.B) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"close", nil}, {"keepalive", []string{"--keep-alive"}}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := testenv.Versity(b, mode.flags...)
			srv.CreateBucket(b, bucket)
			vpid := versityPID(b, srv)
			gwURL, gwPID := gateway(b, srv, "")
			gwEtagURL, gwEtagPID := gateway(b, srv, "etag")
			targets := []target{
				{"direct", client(srv.Endpoint, srv.AccessKey, srv.SecretKey), 0},
				{"gateway", client(gwURL, "worker", "worker-secret"), gwPID},
				{"gateway-etag", client(gwEtagURL, "worker", "worker-secret"), gwEtagPID},
			}
			if bin := os.Getenv("S3BENCH_BEFORE"); bin != "" {
				// S3BENCH_BEFORE_ENV: environment of that process alone,
				// space-separated (GOMAXPROCS=1, GOGC=400, ...).
				u, pid := gatewayBinary(b, bin, srv, "", strings.Fields(os.Getenv("S3BENCH_BEFORE_ENV"))...)
				targets = append(targets, target{"before", client(u, "worker", "worker-secret"), pid})
			}
			for _, size := range []int{4 << 10, 16 << 20} {
				b.Run(sizeName(size), func(b *testing.B) {
					// Short rounds, many of them: a burst of other load then
					// falls on one round, which the median discards.
					puts, conc := 100, 8
					if size > 1<<20 {
						puts, conc = 8, 2
					}
					data := bytes.Repeat([]byte("fencegate"), size/9+1)[:size]
					times := make([][]time.Duration, len(targets))
					cpu := make([]time.Duration, len(targets))
					vcpu := make([]time.Duration, len(targets))
					gcpu := make([]time.Duration, len(targets))
					b.ResetTimer()
					for r := 0; r < b.N; r++ {
						for j := range targets {
							k := (j + r) % len(targets)
							c0 := cpuOf(b, vpid, targets[k].pid)
							v0 := procCPU(b, vpid)
							var g0 time.Duration
							if targets[k].pid != 0 {
								g0 = procCPU(b, targets[k].pid)
							}
							d, err := putRound(targets[k].c, targets[k].name, data, puts, conc)
							if err != nil {
								b.Fatal(err)
							}
							cpu[k] += cpuOf(b, vpid, targets[k].pid) - c0
							vcpu[k] += procCPU(b, vpid) - v0
							if targets[k].pid != 0 {
								gcpu[k] += procCPU(b, targets[k].pid) - g0
							}
							times[k] = append(times[k], d/time.Duration(puts))
						}
					}
					b.StopTimer()
					for k, tg := range targets {
						b.ReportMetric(float64(median(times[k]).Microseconds()), tg.name+"-µs/put")
						perPut := func(k int) float64 { return float64(cpu[k].Microseconds()) / float64(b.N*puts) }
						b.ReportMetric(perPut(k), tg.name+"-cpu-µs/put")
						b.ReportMetric(float64(vcpu[k].Microseconds())/float64(b.N*puts), tg.name+"-vgw-cpu-µs/put")
						b.ReportMetric(float64(gcpu[k].Microseconds())/float64(b.N*puts), tg.name+"-gw-cpu-µs/put")
						if k == 0 {
							continue
						}
						b.ReportMetric(100*perPut(0)/perPut(k), tg.name+"-cpu-%")
						ratios := make([]float64, len(times[k]))
						var each []string
						for r := range ratios {
							ratios[r] = 100 * float64(times[0][r]) / float64(times[k][r])
							each = append(each, fmt.Sprintf("%.0f", ratios[r]))
						}
						slices.Sort(ratios)
						b.ReportMetric(ratios[len(ratios)/2], tg.name+"-%")
						b.Logf("%s/%s: %s/direct per round: %s%%", mode.name, sizeName(size), tg.name, strings.Join(each, " "))
					}
				})
			}
		})
	}
}

type target struct {
	name string
	c    *s3.Client
	pid  int // the gateway's process; 0: none (direct) or in this process
}

// cpuOf is the CPU time used so far by VersityGW (vpid), the gateway gwPID
// (if not 0 and not this process) and this process.
func cpuOf(b *testing.B, vpid, gwPID int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	d := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	d += procCPU(b, vpid)
	if gwPID != 0 && gwPID != os.Getpid() {
		d += procCPU(b, gwPID)
	}
	return d
}

// procCPU is a process's CPU time (testenv.ProcCPU).
func procCPU(b *testing.B, pid int) time.Duration { return testenv.ProcCPU(b, pid) }

// versityPID finds the VersityGW process serving srv (its command line
// names srv.Dir, a fresh temporary directory).
func versityPID(b *testing.B, srv *testenv.S3Server) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cl, []byte("\x00"+srv.Dir)) && bytes.Contains(cl, []byte("posix")) {
			return pid
		}
	}
	b.Fatal("versitygw process not found")
	return 0
}

// putRound writes puts objects of data with conc concurrent writers and
// returns the wall time.
func putRound(c *s3.Client, name string, data []byte, puts, conc int) (time.Duration, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := n.Add(1)
				if i > int64(puts) {
					return
				}
				_, err := c.PutObject(context.Background(), &s3.PutObjectInput{
					Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("ratio/%s/%d/%d", name, len(data), i%64)),
					Body: bytes.NewReader(data),
				})
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", name, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
