package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/api/option"

	"github.com/fencegate/fencegate/coordinator/client/awsfence"
	"github.com/fencegate/fencegate/internal/testenv"
)

// uploadTarget is one way to write an object: straight to the store
// ("direct") or through a gateway route in front of it.
type uploadTarget struct {
	name string
	put  func(object string, data []byte) error
	pid  int // the gateway process's; 0 for direct
}

// uploadStore is one store of BenchmarkUpload: start runs it and returns
// the gateway config of a route in front of it (its default settings), the
// client writing to it directly and the store's process; worker is the same client through the
// gateway at url, sending the token 1.
type uploadStore struct {
	name   string
	start  func(b *testing.B) (yaml string, direct func(string, []byte) error, pid int)
	worker func(b *testing.B, url string) func(string, []byte) error
}

// BenchmarkUpload writes 4 KiB and 16 MiB objects with each store's
// official client (aws-sdk-go-v2 PutObject, cloud.google.com/go/storage's
// single-request multipart upload, azblob's single Put Blob), straight to
// the store (VersityGW, fake-gcs-server, Azurite) and through a gateway
// route in its default configuration in front of the same store, side by
// side in one run.
//
//	bench/upload.sh            # or:
//	go test ./e2e -run '^$' -bench BenchmarkUpload -benchtime 10x -count 5
//
// "%_of_direct" is the gateway's throughput as a percentage of direct's:
// 100 × direct µs/object ÷ gateway µs/object, the median over the rounds
// of each round's ratio. 100 is as fast as direct, 50 half as many objects
// per second. It is not the gateway's time as a share of direct's, which
// would be the inverse and read above 100 for a slower gateway.
//
// Each b.N iteration is one round in which every target writes the same
// number of objects (the order rotates per round), so that load from other
// work on the machine falls on all targets alike; the µs/object figures are
// medians over the rounds. "gateway-cpu-µs/object" is the gateway process's
// CPU per object (/proc/PID/task/*/schedstat), which load from other work
// on the machine leaves alone. "T-store-cpu-µs/object" is the store's CPU
// per object of target T, and "T-client-cpu-µs/object" the benchmark
// process's (the clients'), so that direct and gateway can be checked to
// ask the same of the store and of the client. UPLOADBENCH_BEFORE=PATH adds the target
// "before": the same route served by another fencegate binary (say one
// built from main), for before/after figures in one run:
//
//	(cd /path/to/main-checkout && go build -o /tmp/fencegate-before ./cmd/fencegate)
//	UPLOADBENCH_BEFORE=/tmp/fencegate-before bench/upload.sh
//
// UPLOADBENCH_BEFORE_ENV="GOMAXPROCS=1 GOGC=400" runs "before" with those
// settings in its environment (this tree's build if UPLOADBENCH_BEFORE is
// unset), to compare runtime settings the same way.
//
// UPLOADBENCH_FAST=1 adds the target "fast": the same route with the
// HTTP/1.1 fast path on (gateway.fast_path: true), beside the default.
func BenchmarkUpload(b *testing.B) {
	for _, st := range uploadStores {
		b.Run(st.name, func(b *testing.B) {
			yaml, direct, store := st.start(b)
			gw := startFencegate(b, yaml)
			targets := []uploadTarget{
				{"direct", direct, 0},
				{"gateway", st.worker(b, gw.URL("gateway")), gw.cmd.Process.Pid},
			}
			if os.Getenv("UPLOADBENCH_FAST") != "" {
				p := startFencegate(b, fastPathYAML(yaml))
				targets = append(targets, uploadTarget{"fast", st.worker(b, p.URL("gateway")), p.cmd.Process.Pid})
			}
			if bin, env := os.Getenv("UPLOADBENCH_BEFORE"), os.Getenv("UPLOADBENCH_BEFORE_ENV"); bin != "" || env != "" {
				if bin == "" {
					bin = testenv.BuildBinary(b, "./cmd/fencegate")
				}
				p := startFencegateBin(b, bin, yaml, strings.Fields(env)...)
				targets = append(targets, uploadTarget{"before", st.worker(b, p.URL("gateway")), p.cmd.Process.Pid})
			}
			for _, c := range []struct{ size, perRound int }{{4 << 10, 200}, {16 << 20, 4}} {
				name := fmt.Sprintf("%dKiB", c.size>>10)
				if c.size >= 1<<20 {
					name = fmt.Sprintf("%dMiB", c.size>>20)
				}
				data := bytes.Repeat([]byte("x"), c.size)
				b.Run(name, func(b *testing.B) { uploadRounds(b, targets, store, data, c.perRound) })
			}
		})
	}
}

// uploadRounds runs b.N rounds of perRound uploads of data per target and
// reports the figures described on BenchmarkUpload (store: the store's
// process).
func uploadRounds(b *testing.B, targets []uploadTarget, store int, data []byte, perRound int) {
	per := make([][]float64, len(targets)) // µs per object, per round
	cpu := make([]time.Duration, len(targets))
	storeCPU := make([]time.Duration, len(targets))
	clientCPU := make([]time.Duration, len(targets))
	self := os.Getpid()
	for round := 0; b.Loop(); round++ {
		for k := range targets {
			i := (k + round) % len(targets)
			t := targets[i]
			obj := fmt.Sprintf("bench-%s-%d", t.name, round%4)
			start, cpu0 := time.Now(), time.Duration(0)
			if t.pid != 0 {
				cpu0 = testenv.ProcCPU(b, t.pid)
			}
			store0, client0 := testenv.ProcCPU(b, store), testenv.ProcCPU(b, self)
			for range perRound {
				if err := t.put(obj, data); err != nil {
					b.Fatalf("%s: %v", t.name, err)
				}
			}
			per[i] = append(per[i], float64(time.Since(start).Microseconds())/float64(perRound))
			storeCPU[i] += testenv.ProcCPU(b, store) - store0
			clientCPU[i] += testenv.ProcCPU(b, self) - client0
			if t.pid != 0 {
				cpu[i] += testenv.ProcCPU(b, t.pid) - cpu0
			}
		}
	}
	for i, t := range targets {
		b.ReportMetric(median(per[i]), t.name+"-µs/object")
		objects := float64(len(per[i]) * perRound)
		b.ReportMetric(float64(storeCPU[i].Microseconds())/objects, t.name+"-store-cpu-µs/object")
		b.ReportMetric(float64(clientCPU[i].Microseconds())/objects, t.name+"-client-cpu-µs/object")
		if i == 0 {
			continue
		}
		// Throughput, not time: direct's time over this target's, so a
		// slower target scores below 100.
		ratios := make([]float64, len(per[i]))
		for r := range per[i] {
			ratios[r] = 100 * per[0][r] / per[i][r]
		}
		unit := "%_of_direct"
		if t.name != "gateway" {
			unit = t.name + "-%_of_direct"
		}
		b.ReportMetric(median(ratios), unit)
		b.ReportMetric(float64(cpu[i].Microseconds())/objects, t.name+"-cpu-µs/object")
	}
	// Wall time per op is a round of every target: meaningless beside
	// the figures above.
	b.ReportMetric(0, "ns/op")
}

var uploadStores = []uploadStore{
	{
		name: "s3",
		start: func(b *testing.B) (string, func(string, []byte) error, int) {
			srv := testenv.Versity(b)
			srv.CreateBucket(b, s3Bucket)
			return s3GatewayYAML(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s")),
				s3Putter(s3Worker(srv.Endpoint, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))), srv.Pid
		},
		worker: func(b *testing.B, url string) func(string, []byte) error {
			return s3Putter(s3Worker(url, s3WorkerKey, s3WorkerSecret, func() int64 { return 1 }))
		},
	},
	{
		name: "gcs",
		start: func(b *testing.B) (string, func(string, []byte) error, int) {
			srv := testenv.FakeGCS(b)
			srv.CreateBucket(b, gcsBucket)
			c, err := storage.NewClient(context.Background(), option.WithEndpoint(srv.Endpoint+"/storage/v1/"), option.WithoutAuthentication())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s")), gcsPutter(c), srv.Pid
		},
		worker: func(b *testing.B, url string) func(string, []byte) error {
			return gcsPutter(gcsWorker(b, url, func() int64 { return 1 }))
		},
	},
	{
		name: "azure",
		start: func(b *testing.B) (string, func(string, []byte) error, int) {
			srv := testenv.Azurite(b)
			srv.CreateContainer(b, azContainer)
			return s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, "", "30s")), azPutter(srv.Client(b)), srv.Pid
		},
		worker: func(b *testing.B, url string) func(string, []byte) error {
			return azPutter(azWorker(b, url, func() int64 { return 1 }))
		},
	},
}

func s3Putter(c *s3.Client) func(string, []byte) error {
	return func(key string, data []byte) error {
		_, err := c.PutObject(context.Background(), &s3.PutObjectInput{
			Bucket: aws.String(s3Bucket), Key: aws.String(key), Body: bytes.NewReader(data),
		})
		return err
	}
}

// gcsPutter writes with ChunkSize 0: one multipart request per object,
// whatever its size (the client's default would make 16 MiB a resumable
// session of several requests, a different protocol).
func gcsPutter(c *storage.Client) func(string, []byte) error {
	return func(name string, data []byte) error {
		w := c.Bucket(gcsBucket).Object(name).NewWriter(context.Background())
		w.ChunkSize = 0
		if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	}
}

// azPutter writes with UploadBuffer, which sends one Put Blob for bodies up
// to 256 MiB.
func azPutter(c *azblob.Client) func(string, []byte) error {
	return func(name string, data []byte) error {
		_, err := c.UploadBuffer(context.Background(), azContainer, name, data, nil)
		return err
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
