package workerserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkServe: the cost of serving a small write (512-byte body, of
// known length or chunked as the Go GCS client sends it, a short answer
// with its length) on keep-alive connections, by the fast path and by
// net/http's server alone, with the client in the same process (its cost
// is the same for both).
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
	})
	head := "PUT /orders/7 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nFencing-Token: 42\r\n"
	reqs := []struct{ name, raw string }{
		{"length", head + "Content-Length: 512\r\n\r\n" + strings.Repeat("x", 512)},
		{"chunked", head + "Transfer-Encoding: chunked\r\n\r\n200\r\n" + strings.Repeat("x", 512) + "\r\n0\r\n\r\n"},
	}
	for _, tc := range []struct {
		name  string
		serve func(net.Listener, *http.Server) func()
	}{
		{"net-http", func(ln net.Listener, s *http.Server) func() {
			go s.Serve(ln)
			return func() { s.Close() }
		}},
		{"fast", func(ln net.Listener, s *http.Server) func() {
			f, err := New(s)
			if err != nil {
				b.Fatal(err)
			}
			go f.Serve(ln)
			return func() { f.Close() }
		}},
	} {
		for _, rq := range reqs {
			b.Run(tc.name+"/"+rq.name, func(b *testing.B) { serveBench(b, h, tc.serve, rq.raw) })
		}
	}
}

// serveBench sends req over and over on keep-alive connections to h served
// by serve.
func serveBench(b *testing.B, h http.Handler, serve func(net.Listener, *http.Server) func(), req string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	stop := serve(ln, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute})
	defer stop()
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := io.WriteString(c, req); err != nil {
				b.Error(err)
				return
			}
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
}
