// Command benchupstream is the fast upstream of the proxy benchmark: it
// reads the request body and answers 200 with a short body.
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
	log.Fatal(http.ListenAndServe(*addr, h))
}
