// Command plainproxy is the baseline of the proxy benchmark: a plain
// httputil.ReverseProxy with the same transport settings as fencegate's
// upstreams, and nothing else.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/fencegate/fencegate/adapters/relay"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "listen address")
	upstream := flag.String("upstream", "", "upstream URL")
	// A client that signs the Host it talks to (SigV4) is refused by a
	// store that sees the upstream's address instead.
	keepHost := flag.Bool("keep-host", false, "forward the client's Host header instead of the upstream's")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		log.Fatalf("-upstream: need a URL, got %q", *upstream)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
			if *keepHost {
				pr.Out.Host = pr.In.Host
			}
		},
		Transport: relay.NewTransport(nil),
	}
	log.Fatal(http.ListenAndServe(*addr, rp))
}
