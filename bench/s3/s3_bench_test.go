// Package s3bench compares PutObject through fencegate's S3 adapter with
// PutObject straight to the S3 server (versitygw), side by side in one run:
//
//	scripts/tools.sh versitygw
//	go test ./bench/s3 -run '^$' -bench . -benchtime 400x -count 1
//
// With S3BENCH_INPROC=1 the gateway runs inside the test process (server.New),
// so that -cpuprofile covers it (the client's SDK work is in the profile too;
// focus on fencegate and net/http frames):
//
//	S3BENCH_INPROC=1 go test ./bench/s3 -run '^$' -bench 'PutObject/4KiB/gateway$' -benchtime 2000x -cpuprofile /tmp/gw.prof
//
// With S3BENCH_PROFILE=DIR the gateways run as separate processes (the test
// binary itself serving, see serveProfiled) that write a CPU profile and an
// allocation profile of the gateway alone to DIR/gateway-PORT.{cpu,allocs}
// when they stop:
//
//	S3BENCH_PROFILE=/tmp/gw go test ./bench/s3 -run '^$' -bench 'PutObjectRatio/keepalive/4KiB' -benchtime 5x
//	go tool pprof -top /tmp/gw/gateway-*.cpu
//
// Each sub-benchmark reports throughput (MB/s), p50/p99 latency and, for the
// gateway, its peak resident memory, read from /proc after the run.
package s3bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/server"
)

const bucket = "bench"

func TestMain(m *testing.M) {
	if cfg := os.Getenv("S3BENCH_SERVE"); cfg != "" {
		serveProfiled(cfg, os.Getenv("S3BENCH_PROFILE_TO"))
		return
	}
	testenv.RunMain(m)
}

// serveProfiled serves the gateway config at path (the test binary run by
// gateway under S3BENCH_PROFILE), profiling the CPU until SIGTERM, then
// writes the CPU and allocation profiles to prefix.cpu and prefix.allocs.
func serveProfiled(path, prefix string) {
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	srv, err := server.New(ctx, cfg, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	cpu, err := os.Create(prefix + ".cpu")
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	pprof.StopCPUProfile()
	cpu.Close()
	if f, err := os.Create(prefix + ".allocs"); err == nil {
		pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
	}
	srv.Close()
}

// gateway runs the fencegate binary with one S3 route in front of srv.
func gateway(b *testing.B, srv *testenv.S3Server, precondition string) (url string, pid int) {
	return gatewayBinary(b, testenv.BuildBinary(b, "./cmd/fencegate"), srv, precondition)
}

// gatewayBinary is gateway with the fencegate binary bin.
func gatewayBinary(b *testing.B, bin string, srv *testenv.S3Server, precondition string, env ...string) (url string, pid int) {
	dir := b.TempDir()
	gw := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	admin := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	pre := ""
	if precondition != "" {
		pre = "      precondition: " + precondition + "\n"
	}
	cfg := fmt.Sprintf(`
gateway:
  listen: %s
  routes:
    - name: objects
      match: {path_prefix: /}
      s3:
        endpoint: %s
        access_key_id: %s
        secret_access_key: %s
        clients:
          - {access_key_id: worker, secret_access_key: worker-secret}
      resource: "{bucket}/{key}"
%sstore:
  embedded: {path: %s/fencegate.db}
admin: {listen: %s}
log: {level: warn}
`, gw, srv.Endpoint, srv.AccessKey, srv.SecretKey, pre, dir, admin)
	path := filepath.Join(dir, "fencegate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("S3BENCH_INPROC") != "" {
		return inProcess(b, cfg), os.Getpid()
	}
	cmd := exec.Command(bin, "serve", "-c", path)
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	if dir := os.Getenv("S3BENCH_PROFILE"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		self, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		cmd = exec.Command(self)
		cmd.Env = append(os.Environ(), "S3BENCH_SERVE="+path,
			"S3BENCH_PROFILE_TO="+filepath.Join(dir, "gateway-"+gw[strings.LastIndexByte(gw, ':')+1:]))
		stop = func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }
	}
	if len(env) > 0 {
		cmd.Env = append(cmd.Environ(), env...)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", gw); err == nil {
			c.Close()
			break
		}
		if i > 400 {
			b.Fatal("gateway did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	return "http://" + gw, cmd.Process.Pid
}

// inProcess serves cfg in the test process.
func inProcess(b *testing.B, yaml string) string {
	cfg, err := config.Parse("bench.yaml", []byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	srv, err := server.New(ctx, cfg, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	return "http://" + srv.Addr("gateway")
}

func client(endpoint, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, ""),
	}, awsfence.WithToken(awsfence.Fixed(1)))
}

func BenchmarkPutObject(b *testing.B) {
	srv := testenv.Versity(b)
	srv.CreateBucket(b, bucket)
	gwURL, pid := gateway(b, srv, "")
	gwEtagURL, pidEtag := gateway(b, srv, "etag")
	targets := []struct {
		name string
		c    *s3.Client
		pid  int
	}{
		{"direct", client(srv.Endpoint, srv.AccessKey, srv.SecretKey), 0},
		{"gateway", client(gwURL, "worker", "worker-secret"), pid},
		{"gateway-etag", client(gwEtagURL, "worker", "worker-secret"), pidEtag},
	}
	for _, size := range []int{4 << 10, 16 << 20} {
		data := bytes.Repeat([]byte("fencegate"), size/9+1)[:size]
		for _, tg := range targets {
			b.Run(fmt.Sprintf("%s/%s", sizeName(size), tg.name), func(b *testing.B) {
				conc := 8
				if size > 1<<20 {
					conc = 2
				}
				var n atomic.Int64
				lat := make([]time.Duration, 0, b.N)
				var mu sync.Mutex
				b.SetBytes(int64(size))
				b.ResetTimer()
				var wg sync.WaitGroup
				for w := 0; w < conc; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := n.Add(1)
							if i > int64(b.N) {
								return
							}
							start := time.Now()
							_, err := tg.c.PutObject(context.Background(), &s3.PutObjectInput{
								Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("%s/%d/%d", tg.name, size, i%64)),
								Body: bytes.NewReader(data),
							})
							d := time.Since(start)
							if err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				slices.Sort(lat)
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				}
				if tg.pid != 0 {
					b.ReportMetric(float64(peakRSS(b, tg.pid))/(1<<20), "gw-peak-MiB")
				}
			})
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

// peakRSS is the process's VmHWM in bytes.
func peakRSS(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
