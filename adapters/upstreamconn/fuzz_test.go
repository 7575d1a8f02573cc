package upstreamconn

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// scripted is an upstream that reads one request per connection (head and
// a body of known length) and answers it with the script's bytes, then
// closes.
type scripted struct {
	ln     net.Listener
	script atomic.Pointer[[]byte]
}

func startScripted(tb testing.TB) *scripted {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &scripted{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				c.Write(*s.script.Load())
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c) // until the client closes
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close() })
	return s
}

// outcome is what a client of the gateway's transport sees of an answer.
type outcome struct {
	Err           bool
	Status        int
	Header        http.Header
	ContentLength int64
	Body          string
	BodyErr       bool
	Trailer       http.Header
}

func roundTrip(tr http.RoundTripper, url, method string) (o outcome) {
	var body io.Reader
	if method == "PUT" || method == "POST" {
		body = strings.NewReader("hello")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return outcome{Err: true}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.StatusCode < 100 {
		// net/http hands an unrequested switch and a status below 100 on;
		// the gateway refuses both (adapters/relay's forward), as
		// Transport does.
		return outcome{Err: true}
	}
	b, err := io.ReadAll(resp.Body)
	return outcome{Status: resp.StatusCode, Header: resp.Header, ContentLength: resp.ContentLength,
		Body: string(b), BodyErr: err != nil, Trailer: resp.Trailer}
}

// FuzzTransportMatchesStd: scripted upstream answers read through
// Transport's own connections and through net/http's http.Transport give
// the same results: a transport error or not, status, header, length,
// body, a body read error or not, trailers. The spelling Transport
// records names only fields the answer's Header has.
func FuzzTransportMatchesStd(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nx-amz-meta-foo: bar\r\nX-AMZ-META-FOO: baz\r\netag: \"e\"\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\n\r\nuntil the end",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
		"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
		"garbage",
	} {
		for m := range uint8(4) {
			f.Add([]byte(s), m)
		}
	}
	up := startScripted(f)
	url := "http://" + up.ln.Addr().String() + "/b/k"
	std := &http.Transport{DisableCompression: true, ExpectContinueTimeout: time.Second, MaxIdleConnsPerHost: 4}
	lean := NewTransport(std)
	methods := []string{"GET", "PUT", "HEAD", "DELETE"}
	f.Fuzz(func(t *testing.T, script []byte, method uint8) {
		if len(script) > 64<<10 {
			return
		}
		up.script.Store(&script)
		// Every request on a fresh connection: the scripted upstream
		// closes after one answer, and a write (not replayed) on a pooled
		// connection it is closing fails with either transport.
		std.CloseIdleConnections()
		lean.CloseIdleConnections()
		m := methods[int(method)%len(methods)]
		want := roundTrip(std, url, m)
		std.CloseIdleConnections()
		got := roundTrip(lean, url, m)
		lean.CloseIdleConnections()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s answered %q:\n h1:       %+v\n net/http: %+v", m, script, got, want)
		}

		// The names recorded are the answer's fields, spelled as sent.
		var spell Spelling
		ctx, cancel := context.WithTimeout(WithSpelling(context.Background(), &spell), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := lean.RoundTrip(req)
		if err != nil {
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for k, names := range spell.names {
			if len(names) != len(resp.Header[k]) {
				// A field ReadResponse takes out of the Header or collapses
				// (Transfer-Encoding, a repeated Content-Length): the
				// forward keeps its canonical name.
				continue
			}
			for _, name := range names {
				if http.CanonicalHeaderKey(name) != k || !strings.Contains(string(script), name+":") {
					t.Fatalf("spelling %q -> %q for answer %q with header %v", k, name, script, resp.Header)
				}
			}
		}
	})
}
