package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/fencegate/fencegate/internal/testenv"
)

// BenchmarkGCSUpload writes objects with the official client's multipart
// upload, straight to fake-gcs-server and through a gateway (stamping, no
// precondition) in front of it, and reports the gateway's throughput as a
// percentage of direct's ("gateway-throughput-%-of-direct" = 100 × direct
// µs/object ÷ gateway µs/object, the median over the rounds of each round's
// ratio: 100 is as fast as direct, 50 half as many objects per second; it
// is not the gateway's time as a share of direct's, which would be the
// inverse).
//
//	go test ./e2e -run '^$' -bench BenchmarkGCSUpload -benchtime 15x -count 1
//
// Each b.N iteration is one round in which every target writes the same
// number of objects (the order rotates per round), so that load from other
// work on the machine falls on all targets alike; the figures are medians
// over the rounds. Beside wall time, "-gw-cpu-µs/object" is the gateway
// process's CPU per object (summed over the rounds, /proc/PID/task/*/
// schedstat), which load from other work on the machine leaves alone.
// GCSBENCH_BEFORE=PATH adds the target "before": the same
// route served by another fencegate binary (say one built from main), for
// before/after figures in one run:
//
//	(cd /path/to/main-checkout && go build -o /tmp/fencegate-before ./cmd/fencegate)
//	GCSBENCH_BEFORE=/tmp/fencegate-before go test ./e2e -run '^$' -bench BenchmarkGCSUpload -benchtime 15x
func BenchmarkGCSUpload(b *testing.B) {
	srv := testenv.FakeGCS(b)
	srv.CreateBucket(b, gcsBucket)
	yaml := s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s"))
	direct, err := storage.NewClient(context.Background(), option.WithEndpoint(srv.Endpoint+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	type target struct {
		name string
		c    *storage.Client
		pid  int // the gateway's; 0 for direct
	}
	token := func() int64 { return 1 }
	gw := startFencegate(b, yaml)
	targets := []target{
		{"direct", direct, 0},
		{"gateway", gcsWorker(b, gw.URL("gateway"), token), gw.cmd.Process.Pid},
	}
	if bin := os.Getenv("GCSBENCH_BEFORE"); bin != "" {
		p := startFencegateBin(b, bin, yaml)
		targets = append(targets, target{"before", gcsWorker(b, p.URL("gateway"), token), p.cmd.Process.Pid})
	}
	for _, c := range []struct {
		size, perRound int
	}{{4 << 10, 200}, {16 << 20, 4}} {
		data := bytes.Repeat([]byte("x"), c.size)
		b.Run(fmt.Sprintf("%dKiB", c.size>>10), func(b *testing.B) {
			per := make([][]float64, len(targets)) // µs per object, per round
			cpu := make([]time.Duration, len(targets))
			for round := 0; b.Loop(); round++ {
				for k := range targets {
					i := (k + round) % len(targets)
					obj := fmt.Sprintf("bench-%s-%d", targets[i].name, round%4)
					start, cpu0 := time.Now(), time.Duration(0)
					if targets[i].pid != 0 {
						cpu0 = testenv.ProcCPU(b, targets[i].pid)
					}
					for range c.perRound {
						w := targets[i].c.Bucket(gcsBucket).Object(obj).NewWriter(context.Background())
						w.ChunkSize = 0
						if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
							b.Fatal(err)
						}
						if err := w.Close(); err != nil {
							b.Fatalf("%s: %v", targets[i].name, err)
						}
					}
					per[i] = append(per[i], float64(time.Since(start).Microseconds())/float64(c.perRound))
					if targets[i].pid != 0 {
						cpu[i] += testenv.ProcCPU(b, targets[i].pid) - cpu0
					}
				}
			}
			for i, t := range targets {
				b.ReportMetric(median(per[i]), t.name+"-µs/object")
				if i > 0 {
					// Throughput, not time: direct's time over this
					// target's, so a slower target scores below 100.
					ratios := make([]float64, len(per[i]))
					for r := range per[i] {
						ratios[r] = 100 * per[0][r] / per[i][r]
					}
					b.ReportMetric(median(ratios), t.name+"-throughput-%-of-direct")
					b.ReportMetric(float64(cpu[i].Microseconds())/float64(len(per[i])*c.perRound), t.name+"-gw-cpu-µs/object")
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
