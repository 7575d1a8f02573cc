package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

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

// uploadStore is one store of BenchmarkUpload: start runs it; worker is
// the store's official client through the gateway at url, sending the
// token 1.
type uploadStore struct {
	name   string
	start  func(b *testing.B) uploadServer
	worker func(b *testing.B, url string) func(string, []byte) error
}

// uploadServer is a store started for BenchmarkUpload.
type uploadServer struct {
	yaml     string // the gateway config of a route in front of it (its default settings)
	endpoint string // the store's URL
	pid      int    // the store's process
	// client is the store's official client with the store's own
	// credentials, writing at url: the store's endpoint (direct) or a
	// proxy's with the same path.
	client func(url string) func(string, []byte) error
	// size reads an object's size from the store itself.
	size func(object string) (int64, error)
	// keepHost: the client signs the Host it talks to, so a proxy in
	// front must forward it.
	keepHost bool
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
//
// UPLOADBENCH_PLAIN=1 adds the target "plain": direct's client, with the
// store's own credentials, through bench/cmd/plainproxy (a bare
// httputil.ReverseProxy with the gateway's relay transport) in front of
// the same store; "plain-cpu-µs/object" is the proxy's CPU. What one
// plain Go HTTP hop costs, beside what the gateway costs.
//
// UPLOADBENCH_RAW=1 adds "raw", the same through bench/cmd/rawproxy: a
// Go HTTP/1.1 hop without net/http's server and transport, each client
// connection on one goroutine, the floor of a Go hop.
//
// UPLOADBENCH_NGINX=1 adds the target "nginx": the same with nginx (one
// process, kept upstream connections, bodies streamed) as the proxy, a
// hop that is not Go's.
//
// Every target's object is read back from the store after its rounds.
func BenchmarkUpload(b *testing.B) {
	for _, st := range uploadStores {
		b.Run(st.name, func(b *testing.B) {
			srv := st.start(b)
			gw := startFencegate(b, srv.yaml)
			targets := []uploadTarget{
				{"direct", srv.client(srv.endpoint), 0},
				{"gateway", st.worker(b, gw.URL("gateway")), gw.cmd.Process.Pid},
			}
			for _, p := range []struct{ env, name, pkg string }{
				{"UPLOADBENCH_PLAIN", "plain", "./bench/cmd/plainproxy"},
				{"UPLOADBENCH_RAW", "raw", "./bench/cmd/rawproxy"},
			} {
				if os.Getenv(p.env) != "" {
					url, pid := startGoProxy(b, p.pkg, srv.endpoint, srv.keepHost)
					targets = append(targets, uploadTarget{p.name, srv.client(url), pid})
				}
			}
			if os.Getenv("UPLOADBENCH_NGINX") != "" {
				url, pid := startNginxProxy(b, srv.endpoint)
				targets = append(targets, uploadTarget{"nginx", srv.client(url), pid})
			}
			if os.Getenv("UPLOADBENCH_FAST") != "" {
				p := startFencegate(b, fastPathYAML(srv.yaml))
				targets = append(targets, uploadTarget{"fast", st.worker(b, p.URL("gateway")), p.cmd.Process.Pid})
			}
			if bin, env := os.Getenv("UPLOADBENCH_BEFORE"), os.Getenv("UPLOADBENCH_BEFORE_ENV"); bin != "" || env != "" {
				if bin == "" {
					bin = testenv.BuildBinary(b, "./cmd/fencegate")
				}
				p := startFencegateBin(b, bin, srv.yaml, strings.Fields(env)...)
				targets = append(targets, uploadTarget{"before", st.worker(b, p.URL("gateway")), p.cmd.Process.Pid})
			}
			for _, c := range []struct{ size, perRound int }{{4 << 10, 200}, {16 << 20, 4}} {
				name := fmt.Sprintf("%dKiB", c.size>>10)
				if c.size >= 1<<20 {
					name = fmt.Sprintf("%dMiB", c.size>>20)
				}
				data := bytes.Repeat([]byte("x"), c.size)
				b.Run(name, func(b *testing.B) { uploadRounds(b, targets, srv, data, c.perRound) })
			}
		})
	}
}

// uploadRounds runs b.N rounds of perRound uploads of data per target,
// checks that each target's last object reached srv, and reports the
// figures described on BenchmarkUpload.
func uploadRounds(b *testing.B, targets []uploadTarget, srv uploadServer, data []byte, perRound int) {
	store := srv.pid
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
	for _, t := range targets {
		// The object of the last round: a target that did not reach the
		// store (a proxy answering by itself) fails here.
		obj := fmt.Sprintf("bench-%s-%d", t.name, (len(per[0])-1)%4)
		if n, err := srv.size(obj); err != nil || n != int64(len(data)) {
			b.Fatalf("%s: %s read back from the store: %d bytes, %v; want %d", t.name, obj, n, err, len(data))
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
		start: func(b *testing.B) uploadServer {
			srv := testenv.Versity(b)
			srv.CreateBucket(b, s3Bucket)
			client := func(url string) *s3.Client {
				return s3Worker(url, srv.AccessKey, srv.SecretKey, awsfence.Fixed(0))
			}
			direct := client(srv.Endpoint)
			return uploadServer{
				yaml:     s3GatewayYAML(s3RouteYAML("objects", "", srv.Endpoint, srv, "", "30s")),
				endpoint: srv.Endpoint, pid: srv.Pid, keepHost: true,
				client: func(url string) func(string, []byte) error { return s3Putter(client(url)) },
				size: func(key string) (int64, error) {
					h, err := direct.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s3Bucket), Key: aws.String(key)})
					if err != nil {
						return 0, err
					}
					return aws.ToInt64(h.ContentLength), nil
				},
			}
		},
		worker: func(b *testing.B, url string) func(string, []byte) error {
			return s3Putter(s3Worker(url, s3WorkerKey, s3WorkerSecret, func() int64 { return 1 }))
		},
	},
	{
		name: "gcs",
		start: func(b *testing.B) uploadServer {
			srv := testenv.FakeGCS(b)
			srv.CreateBucket(b, gcsBucket)
			direct := gcsDirect(b, srv.Endpoint)
			return uploadServer{
				yaml:     s3GatewayYAML(gcsRouteYAML("objects", "", srv.Endpoint, "", "30s")),
				endpoint: srv.Endpoint, pid: srv.Pid,
				client: func(url string) func(string, []byte) error { return gcsPutter(gcsDirect(b, url)) },
				size: func(name string) (int64, error) {
					a, err := direct.Bucket(gcsBucket).Object(name).Attrs(context.Background())
					if err != nil {
						return 0, err
					}
					return a.Size, nil
				},
			}
		},
		worker: func(b *testing.B, url string) func(string, []byte) error {
			return gcsPutter(gcsWorker(b, url, func() int64 { return 1 }))
		},
	},
	{
		name: "azure",
		start: func(b *testing.B) uploadServer {
			srv := testenv.Azurite(b)
			srv.CreateContainer(b, azContainer)
			direct := srv.Client(b)
			return uploadServer{
				yaml:     s3GatewayYAML(azRouteYAML("blobs", "", srv.Endpoint, "", "30s")),
				endpoint: srv.Endpoint, pid: srv.Pid,
				client: func(url string) func(string, []byte) error { return azPutter(srv.ClientAt(b, url)) },
				size: func(name string) (int64, error) {
					p, err := direct.ServiceClient().NewContainerClient(azContainer).NewBlobClient(name).GetProperties(context.Background(), nil)
					if err != nil {
						return 0, err
					}
					return *p.ContentLength, nil
				},
			}
		},
		worker: func(b *testing.B, url string) func(string, []byte) error {
			return azPutter(azWorker(b, url, func() int64 { return 1 }))
		},
	},
}

// startNginxProxy runs nginx as a reverse proxy in front of the store at
// endpoint, as startGoProxy does plainproxy: one process (its CPU is
// the pid's), kept connections both ways, request and answer bodies
// streamed rather than buffered, the client's Host passed on.
func startNginxProxy(b *testing.B, endpoint string) (string, int) {
	u, err := url.Parse(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s;
  proxy_temp_path %[1]s;
  fastcgi_temp_path %[1]s;
  uwsgi_temp_path %[1]s;
  scgi_temp_path %[1]s;
  upstream store { server %[3]s; keepalive 16; }
  server {
    listen %[2]s;
    client_max_body_size 0;
    location / {
      proxy_pass http://store;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_request_buffering off;
      proxy_buffering off;
    }
  }
}
`, dir, addr, u.Host)), 0o600); err != nil {
		b.Fatal(err)
	}
	return startProxyCmd(b, exec.Command("/usr/sbin/nginx", "-p", dir, "-c", conf, "-e", "stderr"), addr, u)
}

// startGoProxy runs the proxy command pkg (bench/cmd/plainproxy or
// rawproxy) in front of the store at endpoint and returns the URL to use
// instead of endpoint (same path) and the proxy's process.
func startGoProxy(b *testing.B, pkg, endpoint string, keepHost bool) (string, int) {
	u, err := url.Parse(endpoint)
	if err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	args := []string{"-listen", addr, "-upstream", u.Scheme + "://" + u.Host}
	if keepHost {
		args = append(args, "-keep-host")
	}
	return startProxyCmd(b, exec.Command(testenv.BuildBinary(b, pkg), args...), addr, u)
}

// startProxyCmd starts cmd, a proxy listening on addr, stops it at the end
// of b, and returns endpoint u with addr as its host, and the proxy's
// process.
func startProxyCmd(b *testing.B, cmd *exec.Cmd, addr string, u *url.URL) (string, int) {
	log := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testenv.StartDying(cmd); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if b.Failed() {
			b.Logf("%s log:\n%s", filepath.Base(cmd.Path), log.Tail(20))
		}
	})
	testenv.WaitTCP(b, addr, 10*time.Second)
	v := *u
	v.Host = addr
	return v.String(), cmd.Process.Pid
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
