package s3bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
func BenchmarkPutObjectRatio(b *testing.B) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"close", nil}, {"keepalive", []string{"--keep-alive"}}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := testenv.Versity(b, mode.flags...)
			srv.CreateBucket(b, bucket)
			gwURL, _ := gateway(b, srv, "")
			gwEtagURL, _ := gateway(b, srv, "etag")
			targets := []struct {
				name string
				c    *s3.Client
			}{
				{"direct", client(srv.Endpoint, srv.AccessKey, srv.SecretKey)},
				{"gateway", client(gwURL, "worker", "worker-secret")},
				{"gateway-etag", client(gwEtagURL, "worker", "worker-secret")},
			}
			if bin := os.Getenv("S3BENCH_BEFORE"); bin != "" {
				u, _ := gatewayBinary(b, bin, srv, "")
				targets = append(targets, struct {
					name string
					c    *s3.Client
				}{"before", client(u, "worker", "worker-secret")})
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
					b.ResetTimer()
					for r := 0; r < b.N; r++ {
						for j := range targets {
							k := (j + r) % len(targets)
							d, err := putRound(targets[k].c, targets[k].name, data, puts, conc)
							if err != nil {
								b.Fatal(err)
							}
							times[k] = append(times[k], d/time.Duration(puts))
						}
					}
					b.StopTimer()
					for k, tg := range targets {
						b.ReportMetric(float64(median(times[k]).Microseconds()), tg.name+"-µs/put")
						if k == 0 {
							continue
						}
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
