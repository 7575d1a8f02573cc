// Command tunedproxy is the "tuned Go reverse proxy" of bench/dataplane.sh:
// httputil.ReverseProxy as a careful Go proxy would set it up, and nothing
// fencegate-specific. Against plainproxy it adds what public Go proxies
// (Traefik, Caddy) do for speed: copy buffers of 32 KiB from a sync.Pool, a
// large idle pool to the upstream so 32 client connections never redial,
// a Director (no Rewrite header copy) and no logging.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v := b.p.Get(); v != nil {
		return *v.(*[]byte)
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "listen address")
	upstream := flag.String("upstream", "", "upstream URL")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		log.Fatalf("-upstream: need a URL, got %q", *upstream)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = u.Scheme, u.Host
		},
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			WriteBufferSize:     32 << 10,
			ReadBufferSize:      32 << 10,
		},
		BufferPool: &bufferPool{},
		ErrorLog:   log.New(discard{}, "", 0),
	}
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(discard{}, "", 0)}
	log.Fatal(srv.ListenAndServe())
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
