package s3_test

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/bolt"
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/s3"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/testenv"
)

// BenchmarkSignerEndToEnd forwards 4 KiB PutObjects through the gateway
// (gateway.ServeHTTP with the S3 adapter in its default configuration:
// verify, fence, re-sign, forward over TCP) to a real VersityGW, once with
// the hand-written upstream signer and once with aws-sdk-go-v2's v4.Signer
// (s3.UseSDKSigner), in alternating rounds of b.N writes each so that
// drift hits both alike. It reports the median round of each as wall time
// and this process's CPU time per write (the gateway's work; VersityGW
// runs in its own process), and the SDK's over the hand signer's. The
// worker's requests are signed beforehand, so the client's work is not in
// the figures: the ratio is an upper bound of the signer's share of a
// gateway process, which also parses the worker's HTTP.
//
//	go test ./adapters/s3 -run '^$' -bench SignerEndToEnd -benchtime 300x -count 1
func BenchmarkSignerEndToEnd(b *testing.B) {
	srv := testenv.Versity(b)
	srv.CreateBucket(b, "bench")
	body := benchBody()
	type side struct {
		name string
		g    *gateway.Gateway
		reqs []*http.Request
		wall []time.Duration
		cpu  []time.Duration
	}
	mk := func(name string, sdk bool) *side {
		st, err := bolt.Open(filepath.Join(b.TempDir(), "fence.db"), bolt.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		g, u := benchGateway(b, st, s3.Options{
			Spec:        objectstore.Spec{Route: "objects", Resource: "{bucket}/{key}", Endpoint: srv.Endpoint},
			AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
			Clients: []s3.Client{{AccessKeyID: "worker", SecretAccessKey: "worker-secret"}},
		})
		if sdk {
			s3.UseSDKSigner(u)
		}
		s := &side{name: name, g: g}
		for i := range 8 {
			s.reqs = append(s.reqs, sdkPut(b, "http://127.0.0.1:8080/bench/"+name+"/"+strconv.Itoa(i)+"?x-id=PutObject", body, time.Now()))
		}
		return s
	}
	sides := []*side{mk("hand", false), mk("sdk", true)}
	w := &discardWriter{h: http.Header{}}
	round := func(s *side, n int) {
		cpu0, t0 := processCPU(), time.Now()
		for i := range n {
			r := *s.reqs[i%len(s.reqs)]
			r.Header = r.Header.Clone()
			r.Body = io.NopCloser(bytes.NewReader(body))
			clear(w.h)
			w.code = 0
			s.g.ServeHTTP(w, &r)
			if w.code != http.StatusOK {
				b.Fatalf("%s: answer %d", s.name, w.code)
			}
		}
		s.wall = append(s.wall, time.Since(t0)/time.Duration(n))
		s.cpu = append(s.cpu, (processCPU()-cpu0)/time.Duration(n))
	}
	for _, s := range sides {
		round(s, 20) // warm the connections and the fences
	}
	for _, s := range sides {
		s.wall, s.cpu = nil, nil
	}
	b.ResetTimer()
	const rounds = 7
	for range rounds {
		for _, s := range sides {
			round(s, b.N)
		}
	}
	b.StopTimer()
	med := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	for _, s := range sides {
		b.ReportMetric(float64(med(s.wall)), s.name+"-ns/write")
		b.ReportMetric(float64(med(s.cpu)), s.name+"-cpu-ns/write")
	}
	b.ReportMetric(float64(med(sides[1].cpu))/float64(med(sides[0].cpu)), "sdk/hand-cpu")
	b.ReportMetric(float64(med(sides[1].wall))/float64(med(sides[0].wall)), "sdk/hand-wall")
}
