// Command benchupstream is the fast upstream of the proxy benchmark: it
// reads the request body and answers 200 with a short body. It speaks
// HTTP/1.1 and, with prior knowledge, HTTP/2 over cleartext (h2c) on the
// same port, for routes with upstream.h2c.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "listen address")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("ok\n"))
	})
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Addr: *addr, Handler: h, Protocols: &p}
	log.Fatal(srv.ListenAndServe())
}
