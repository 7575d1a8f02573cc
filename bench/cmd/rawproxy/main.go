// Command rawproxy is the floor of a Go HTTP/1.1 hop for the upload
// benchmark (e2e BenchmarkUpload, UPLOADBENCH_RAW=1): each client
// connection is served on one goroutine that reads a request, writes it to
// the connection's own upstream connection, reads the answer and writes it
// back. No net/http server or transport: no background read, no timers, no
// connection goroutines, so it shows how much of a plain
// httputil.ReverseProxy's cost (bench/cmd/plainproxy) is those hand-offs.
// Not a proxy to deploy: no timeouts, no hop-by-hop header handling beyond
// Connection and Expect, one upstream.
package main

import (
	"bufio"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
)

const bufSize = 64 << 10 // as the relay transport's socket buffers

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "listen address")
	upstream := flag.String("upstream", "", "upstream URL (http)")
	keepHost := flag.Bool("keep-host", false, "forward the client's Host header instead of the upstream's")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" || u.Scheme != "http" {
		log.Fatalf("-upstream: need an http URL, got %q", *upstream)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	p := &proxy{upstream: u.Host, keepHost: *keepHost}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go p.serve(c)
	}
}

type proxy struct {
	upstream string
	keepHost bool
}

// serve relays the requests of one client connection in order, over one
// upstream connection dialed when needed (again after the upstream closes
// it), and keeps the client's connection open whatever the upstream does.
func (p *proxy) serve(c net.Conn) {
	defer c.Close()
	br, bw := bufio.NewReaderSize(c, bufSize), bufio.NewWriterSize(c, bufSize)
	var up *upConn
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if up == nil {
			if up, err = dial(p.upstream); err != nil {
				log.Printf("dial %s: %v", p.upstream, err)
				return
			}
		}
		if req.Header.Get("Expect") == "100-continue" {
			// Answer it here: the body is sent upstream right after
			// the head, and the client waits for this before sending it.
			req.Header.Del("Expect")
			io.WriteString(bw, "HTTP/1.1 100 Continue\r\n\r\n")
			bw.Flush()
		}
		clientClose := req.Close
		req.Close = false
		req.Header.Del("Connection")
		if !p.keepHost {
			req.Host = p.upstream
		}
		if err := req.Write(up.w); err != nil {
			return
		}
		if err := up.w.Flush(); err != nil {
			return
		}
		resp, err := http.ReadResponse(up.r, req)
		if err != nil {
			return
		}
		upClose := resp.Close
		resp.Close = clientClose
		resp.Header.Del("Connection")
		err = resp.Write(bw)
		resp.Body.Close()
		if err != nil || bw.Flush() != nil || clientClose {
			return
		}
		if upClose {
			up.Close()
			up = nil
		}
	}
}

type upConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dial(addr string) (*upConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &upConn{c, bufio.NewReaderSize(c, bufSize), bufio.NewWriterSize(c, bufSize)}, nil
}
