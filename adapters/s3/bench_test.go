package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/gateway"
)

// fastUpstream answers every request at once, as S3 answers a PutObject:
// 200 with an ETag, the body read.
type fastUpstream struct{}

func (fastUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1, Request: req,
		Header: http.Header{"Etag": {`"0123456789abcdef0123456789abcdef"`}, "X-Amz-Request-Id": {"1"},
			"Content-Length": {"0"}, "Date": {"Thu, 03 Dec 2026 17:00:00 GMT"}},
		Body: http.NoBody, ContentLength: 0,
	}, nil
}

// BenchmarkGatewayPutObject is the gateway's own work on a 4 KiB PutObject
// as aws-sdk-go-v2 sends it (same headers, signed the same way), through
// gateway.ServeHTTP with the S3 adapter (verify, fence, re-sign) in front
// of an upstream that answers at once: no sockets, no HTTP parsing of the
// worker's request.
//
//	go test ./adapters/s3 -run '^$' -bench GatewayPutObject -benchmem -cpuprofile /tmp/s3.cpu
func BenchmarkGatewayPutObject(b *testing.B) {
	for _, etag := range []bool{false, true} {
		name := "plain"
		if etag {
			name = "etag"
		}
		b.Run(name, func(b *testing.B) {
			now := time.Now()
			st, err := bolt.Open(filepath.Join(b.TempDir(), "fence.db"), bolt.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			opts := s3.Options{
				Spec: objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: "http://127.0.0.1:7070",
					Transport: fastUpstream{}, Now: func() time.Time { return now }},
				AccessKeyID: "gw", SecretAccessKey: "gw-secret",
				Clients: []s3.Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
			}
			if etag {
				opts.Precondition, opts.Versions = true, st
			}
			g, _ := benchGateway(b, st, opts)
			body := benchBody()
			// Requests of a few keys, signed beforehand; each is sent as a
			// shallow copy with a fresh body.
			var reqs []*http.Request
			for _, k := range []string{"1", "2", "3", "4"} {
				reqs = append(reqs, sdkPut(b, "http://127.0.0.1:8080/bench/ratio/"+k+"?x-id=PutObject", body, now))
			}
			rd := bytes.NewReader(body)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			i := 0
			cpu0 := processCPU()
			for b.Loop() {
				r := *reqs[i%len(reqs)]
				i++
				r.Header = r.Header.Clone()
				rd.Reset(body)
				r.Body = io.NopCloser(rd)
				clear(w.h)
				w.code = 0
				g.ServeHTTP(w, &r)
				if w.code != http.StatusOK {
					b.Fatalf("answer %d", w.code)
				}
			}
			// CPU time per request (this process, GC included): wall
			// time is only a figure on an otherwise idle machine.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchGateway is a gateway with one S3 route, "{bucket}/{key}", of the
// upstream opts describes, its fences in st.
func benchGateway(b *testing.B, st *bolt.Store, opts s3.Options) (*gateway.Gateway, *s3.Upstream) {
	u, err := s3.New(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(gateway.NewLocalFence(st, gateway.LocalFenceOptions{}), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	rt, err := gateway.NewRoute(gateway.RouteOptions{Name: "objects", Resource: "{bucket}/{key}",
		Vars: func(n string) bool { return n == "bucket" || n == "key" }}, u)
	if err != nil {
		b.Fatal(err)
	}
	g.SetRoutes([]*gateway.Route{rt})
	return g, u
}

// benchBody is a 4 KiB object.
func benchBody() []byte { return bytes.Repeat([]byte("fencegate"), 4096/9+1)[:4096] }

// sdkPut is a PutObject of body to url as aws-sdk-go-v2 sends it (same
// headers, signed the same way) by the worker, with token 1, at now.
func sdkPut(b *testing.B, url string, body []byte, now time.Time) *http.Request {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req := httptest.NewRequest(http.MethodPut, url, nil)
	req.Header.Set("User-Agent", "aws-sdk-go-v2/1.45.1 ua/2.1 os/linux lang/go#1.26.8 md/GOOS#linux md/GOARCH#amd64 api/s3#1.109.1 m/E,e")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("Amz-Sdk-Invocation-Id", "530002ae-58c0-4ceb-9dcb-9b832ed71de2")
	req.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Fencing-Token", "1")
	req.Header.Set("X-Amz-Content-Sha256", hash)
	req.ContentLength = int64(len(body))
	err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "worker", SecretAccessKey: "worker-secret"},
		req, hash, "s3", "us-east-1", now)
	if err != nil {
		b.Fatal(err)
	}
	return req
}

// processCPU is the CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// discardWriter is a reusable http.ResponseWriter that keeps the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
