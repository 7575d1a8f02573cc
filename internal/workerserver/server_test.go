package workerserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// handler answers by path in the ways a proxy's answers vary: declared
// and computed lengths, chunked and flushed answers, trailers, 1xx,
// bodiless statuses, unread request bodies, aborts. fast counts the
// requests served by the fast path (their writer is a *response).
func handler(fast *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*response); ok {
			fast.Add(1)
		}
		h := w.Header()
		switch r.URL.Path {
		case "/cl":
			h.Set("Content-Length", "5")
			h.Set("Content-Type", "text/plain")
			io.WriteString(w, "hello")
		case "/small":
			io.WriteString(w, "<html>hi</html>") // length computed, type sniffed
		case "/big":
			h.Set("Content-Type", "application/octet-stream")
			for range 3 {
				w.Write(bytes.Repeat([]byte("x"), 1500))
			}
		case "/flush":
			io.WriteString(w, "a")
			http.NewResponseController(w).Flush()
			io.WriteString(w, "b")
		case "/trailer":
			h.Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			h.Set("X-Sum", "42")
		case "/trailer-prefix":
			io.WriteString(w, "body")
			http.NewResponseController(w).Flush()
			h.Set(http.TrailerPrefix+"X-Late", "7")
		case "/204":
			h.Set("Content-Length", "3")
			w.WriteHeader(http.StatusNoContent)
			if _, err := w.Write([]byte("abc")); !errors.Is(err, http.ErrBodyNotAllowed) {
				panic(fmt.Sprintf("204 body write: %v", err))
			}
		case "/304":
			h.Set("Content-Type", "text/plain")
			h.Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		case "/103":
			h.Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			clear(h)
			h.Set("Content-Length", "2")
			io.WriteString(w, "ok")
		case "/echo":
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			h.Set("X-Len", fmt.Sprint(len(b)))
			if r.Trailer != nil {
				h.Set("X-Req-Trailer", fmt.Sprint(r.Trailer))
			}
			w.Write(b)
		case "/slow":
			// Runs past the client-gone watch's delay.
			io.ReadAll(r.Body)
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, "slow")
		case "/noread":
			io.WriteString(w, "ignored your body")
		case "/short":
			h.Set("Content-Length", "10")
			io.WriteString(w, "12345")
		case "/abort":
			h.Set("Content-Length", "10")
			io.WriteString(w, "12345")
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		case "/close":
			h.Set("Connection", "close")
			io.WriteString(w, "bye")
		case "/ctx":
			_, srv := r.Context().Value(http.ServerContextKey).(*http.Server)
			_, local := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			fmt.Fprintf(w, "server=%v local=%v remote=%v host=%s uri=%s proto=%s header-host=%v",
				srv, local, r.RemoteAddr != "", r.Host, r.RequestURI, r.Proto, r.Header["Host"] != nil)
		case "/code":
			w.WriteHeader(599)
		default:
			http.NotFound(w, r)
		}
	})
}

type answer struct {
	Status   int
	Header   http.Header
	Body     string
	Trailer  http.Header
	Err      string
	ConnDone bool // the server closed the connection after this answer
}

// exchange writes raw to addr, half-closes, and reads every answer.
func exchange(t *testing.T, addr string, raw string, heads []string) []answer {
	t.Helper()
	return exchangeSteps(t, addr, []string{raw}, 0, heads)
}

// TestMatchesNetHTTP sends the same raw requests to net/http's server and
// to workerserver in front of one, and compares the answers as a client reads
// them: status, header (but Date), body, trailers, and whether the
// connection ended. It also checks which requests the fast path served.
func TestMatchesNetHTTP(t *testing.T) {
	var fastCount, stockCount atomic.Int64
	stock := &http.Server{Handler: handler(&stockCount), ReadHeaderTimeout: 5 * time.Second, ErrorLog: quietLog()}
	stockLn := listen(t)
	go stock.Serve(stockLn)
	t.Cleanup(func() { stock.Close() })

	fb := &http.Server{Handler: handler(&fastCount), ReadHeaderTimeout: 5 * time.Second, ErrorLog: quietLog()}
	fast, err := New(fb)
	if err != nil {
		t.Fatal(err)
	}
	fastLn := listen(t)
	go fast.Serve(fastLn)
	t.Cleanup(func() { fast.Close() })

	put := func(path, extra, body string) string {
		return fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: gw\r\n%sContent-Length: %d\r\n\r\n%s", path, extra, len(body), body)
	}
	big := strings.Repeat("b", 300<<10)
	cases := []struct {
		name  string
		raw   string
		heads []string // request methods, for HEAD answers
		fast  int64    // requests the fast path must serve
	}{
		{"declared length", put("/cl", "", "x"), nil, 1},
		{"computed length and sniffed type", put("/small", "", ""), nil, 1},
		{"chunked", put("/big", "", "x"), nil, 1},
		{"flushed", put("/flush", "", "x"), nil, 1},
		{"trailer", put("/trailer", "", "x"), nil, 1},
		{"trailer prefix", put("/trailer-prefix", "", "x"), nil, 1},
		{"204", put("/204", "", "x"), nil, 1},
		{"304", put("/304", "", ""), nil, 1},
		{"103 then 200", put("/103", "", "x"), nil, 1},
		{"echo", put("/echo", "", "0123456789"), nil, 1},
		{"unread small body", put("/noread", "", "0123456789") + put("/cl", "", ""), nil, 2},
		{"unread large body closes", put("/noread", "", big) + put("/cl", "", ""), nil, 1},
		{"unread body at the limit closes", put("/noread", "", strings.Repeat("b", 256<<10)) + put("/cl", "", ""), nil, 1},
		{"unread body below the limit", put("/noread", "", strings.Repeat("b", 256<<10-1)) + put("/cl", "", ""), nil, 2},
		{"short answer closes", put("/short", "", "") + put("/cl", "", ""), nil, 1},
		{"abort", put("/abort", "", "") + put("/cl", "", ""), nil, 1},
		{"handler closes", put("/close", "", "") + put("/cl", "", ""), nil, 1},
		{"client closes", put("/cl", "Connection: close\r\n", "") + put("/cl", "", ""), nil, 1},
		{"context", put("/ctx", "", ""), nil, 1},
		{"odd status", put("/code", "", ""), nil, 1},
		{"pipelined", put("/echo", "", "one") + put("/echo", "", "two") + put("/cl", "", ""), nil, 3},
		{"POST then CRLF", "POST /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi\r\n" + put("/cl", "", ""), nil, 2},
		{"GET", "GET /cl HTTP/1.1\r\nHost: gw\r\n\r\n", nil, 1},
		{"as many fields as allowed", "PUT /cl HTTP/1.1\r\nHost: gw\r\n" + strings.Repeat("X-A: 1\r\n", http.DefaultMaxHeaderValueCount-2) + "Content-Length: 0\r\n\r\n", nil, 1},

		// Chunked request bodies: read by net/http's decoder, trailers as
		// its server reads them, errors alike.
		{"chunked request", chunkedReq("/echo", "", "3\r\nabc\r\n0\r\n\r\n"), nil, 1},
		{"chunked, several chunks", chunkedReq("/echo", "", "3\r\nabc\r\n00A\r\n0123456789\r\n1\r\nz\r\n0\r\n\r\n"), nil, 1},
		{"chunked, extensions", chunkedReq("/echo", "", "3;a=1;b=\"x\"\r\nabc\r\n0;end\r\n\r\n"), nil, 1},
		{"chunked, empty", chunkedReq("/echo", "", "0\r\n\r\n"), nil, 1},
		{"chunked, pipelined", chunkedReq("/echo", "", "2\r\nhi\r\n0\r\n\r\n") + chunkedReq("/echo", "", "1\r\nx\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 3},
		{"chunked, trailer", chunkedReq("/echo", "", "2\r\nhi\r\n0\r\nX-T: 1\r\nX-U: a\r\n b\r\n\r\n") + put("/cl", "", ""), nil, 2},
		{"chunked, token in trailer", chunkedReq("/echo", "", "2\r\nhi\r\n0\r\nFencing-Token: 9\r\n\r\n"), nil, 1},
		{"chunked, as many trailer fields as allowed", chunkedReq("/echo", "", "1\r\nx\r\n0\r\n"+strings.Repeat("X-A: 1\r\n", http.DefaultMaxHeaderValueCount)+"\r\n") + put("/cl", "", ""), nil, 2},
		{"chunked, too many trailer fields", chunkedReq("/echo", "", "1\r\nx\r\n0\r\n"+strings.Repeat("X-A: 1\r\n", http.DefaultMaxHeaderValueCount+1)+"\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, bad field beyond the limit", chunkedReq("/echo", "", "1\r\nx\r\n0\r\n"+strings.Repeat("X-A: 1\r\n", http.DefaultMaxHeaderValueCount)+"bad\r\n\r\n"), nil, 1},
		{"chunked, trailer too long", chunkedReq("/echo", "", "1\r\nx\r\n0\r\nX-A: "+strings.Repeat("a", 4090)+"\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, trailer within 4 KiB", chunkedReq("/echo", "", "1\r\nx\r\n0\r\nX-A: "+strings.Repeat("a", 4084)+"\r\n\r\n") + put("/cl", "", ""), nil, 2},
		{"chunked, bad trailer", chunkedReq("/echo", "", "1\r\nx\r\n0\r\nno colon\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, trailer cut", chunkedReq("/echo", "", "1\r\nx\r\n0\r\nX-A: 1\r\n"), nil, 1},
		{"chunked, no last chunk", chunkedReq("/echo", "", "1\r\nx\r\n"), nil, 1},
		{"chunked, cut in a chunk", chunkedReq("/echo", "", "5\r\nab"), nil, 1},
		{"chunked, bad size", chunkedReq("/echo", "", "zz\r\nab\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, signed size", chunkedReq("/echo", "", "+2\r\nab\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, size overflows", chunkedReq("/echo", "", "10000000000000000\r\nab\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, data longer than its size", chunkedReq("/echo", "", "1\r\nab\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, bare LF", chunkedReq("/echo", "", "2\nhi\n0\n\n") + put("/cl", "", ""), nil, 1},
		{"chunked, long size line", chunkedReq("/echo", "", "1;"+strings.Repeat("e", 5000)+"\r\nx\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, too much non-data", chunkedReq("/echo", "", strings.Repeat("1;"+strings.Repeat("e", 1000)+"\r\nx\r\n", 20)+"0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, smuggled request in the body", chunkedReq("/echo", "", "0\r\n\r\n"+put("/cl", "", "")), nil, 2},
		{"chunked, unread small body", chunkedReq("/noread", "", "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n") + put("/cl", "", ""), nil, 2},
		{"chunked, unread large body closes", chunkedReq("/noread", "", strings.Repeat(fmt.Sprintf("%x\r\n%s\r\n", 8<<10, strings.Repeat("c", 8<<10)), 33)+"0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, unread body at the limit", chunkedReq("/noread", "", strings.Repeat(fmt.Sprintf("%x\r\n%s\r\n", 8<<10, strings.Repeat("c", 8<<10)), 32)+"0\r\n\r\n") + put("/cl", "", ""), nil, 2},
		{"chunked, unread bad body", chunkedReq("/noread", "", "3\r\nabcX\r\n0\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"chunked, POST then CRLF", "POST /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n\r\n" + put("/cl", "", ""), nil, 2},
		{"chunked, upper case", "PUT /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", nil, 1},
		{"chunked, twice", "PUT /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", nil, 0},
		{"chunked, on a GET", "GET /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", nil, 1},

		// Handed to net/http, at the first request or a later one.
		{"HTTP/1.0", "PUT /cl HTTP/1.0\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"HTTP/1.0 keep-alive", "GET /cl HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /cl HTTP/1.0\r\n\r\n", nil, 0},
		{"expect", put("/echo", "Expect: 100-continue\r\n", "abc"), nil, 0},
		{"bad expect", put("/echo", "Expect: magic\r\n", "abc"), nil, 0},
		{"chunked with length", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", nil, 0},
		{"chunked with declared trailer", chunkedReq("/echo", "Trailer: X-T\r\n", "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"), nil, 0},
		{"too many fields", "PUT /cl HTTP/1.1\r\nHost: gw\r\n" + strings.Repeat("X-A: 1\r\n", http.DefaultMaxHeaderValueCount) + "Content-Length: 0\r\n\r\n", nil, 0},
		{"HEAD", "HEAD /small HTTP/1.1\r\nHost: gw\r\n\r\n", []string{"HEAD"}, 0},
		{"later HEAD", put("/cl", "", "") + "HEAD /small HTTP/1.1\r\nHost: gw\r\n\r\n" + put("/cl", "", ""), []string{"PUT", "HEAD", "PUT"}, 1},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n", nil, 0},
		{"absolute target", "PUT http://other/ctx HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"no Host", "PUT /cl HTTP/1.1\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"empty Host", "PUT /cl HTTP/1.1\r\nHost:\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"two Hosts", "PUT /cl HTTP/1.1\r\nHost: a\r\nhost: b\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"bad Host", "PUT /cl HTTP/1.1\r\nHost: a b\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"bad header name", "PUT /cl HTTP/1.1\r\nHost: gw\r\nX Y: 1\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"bad header value", "PUT /cl HTTP/1.1\r\nHost: gw\r\nX-Y: a\x01b\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"two lengths", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", nil, 0},
		{"signed length", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: +2\r\n\r\nab", nil, 0},
		{"bare LF", "PUT /cl HTTP/1.1\nHost: gw\nContent-Length: 0\n\n", nil, 0},
		{"leading CRLF", "\r\n" + put("/cl", "", ""), nil, 0},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil, 0},
		{"HTTP/0.9", "GET /cl\r\n\r\n", nil, 0},
		{"upgrade", "GET /cl HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", nil, 0},
		{"h2c", "GET /cl HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", nil, 0},
		{"large head", "PUT /cl HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 10<<10) + "\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"too large head", "PUT /cl HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"fast then handed off", put("/cl", "", "") + chunkedReq("/echo", "Trailer: X-T\r\n", "2\r\nhi\r\n0\r\nX-T: 1\r\n\r\n") + put("/cl", "", ""), nil, 1},
		{"truncated body", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\nabc", nil, 1},
		{"garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", nil, 0},

		// Attempts at framing the two servers (or the fast path and the
		// upstream) would read differently: refused or handed off, or
		// read alike by the one parser both use (a folded line is joined,
		// and the upstream gets it unfolded).
		{"obs-fold", "PUT /echo HTTP/1.1\r\nHost: gw\r\nX-A: 1\r\n 2\r\nContent-Length: 2\r\n\r\nhi", nil, 1},
		{"CR CR LF", "PUT /echo HTTP/1.1\r\nHost: gw\r\r\nContent-Length: 2\r\n\r\nhi", nil, 0},
		{"space before colon", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length : 2\r\n\r\nhi", nil, 0},
		{"length and smuggled request", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nPUT /cl HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"chunked in a list", "PUT /echo HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", nil, 0},
		{"NUL in target", "PUT /e\x00cho HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", nil, 0},
		{"lower-case method", "put /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi", nil, 1},
		{"leading zeros in length", "PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 002\r\n\r\nhi", nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := fastCount.Load()
			want := exchange(t, stockLn.Addr().String(), tc.raw, tc.heads)
			got := exchange(t, fastLn.Addr().String(), tc.raw, tc.heads)
			normalize(want)
			normalize(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("answers differ\n workerserver:  %+v\n net/http: %+v", got, want)
			}
			if n := fastCount.Load() - before; n != tc.fast {
				t.Errorf("fast path served %d requests, want %d", n, tc.fast)
			}
		})
	}
}

// chunkedReq is a PUT to path with a chunked body (its encoded form).
func chunkedReq(path, extra, encoded string) string {
	return "PUT " + path + " HTTP/1.1\r\nHost: gw\r\n" + extra + "Transfer-Encoding: chunked\r\n\r\n" + encoded
}

// normalize drops what differs between two servers by design: the
// connection's own addresses. Header order never mattered.
func normalize(as []answer) {
	for i := range as {
		for _, h := range []http.Header{as[i].Header, as[i].Trailer} {
			for k, v := range h {
				sort.Strings(v)
				h[k] = v
			}
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }

// startFast serves h on the fast path (with net/http behind it).
func startFast(t *testing.T, h http.Handler) (*Server, string) {
	t.Helper()
	fast, err := New(&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, ErrorLog: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	done := make(chan error, 1)
	go func() { done <- fast.Serve(ln) }()
	t.Cleanup(func() {
		fast.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return fast, ln.Addr().String()
}

// A client that closes its connection while its request waits (a write
// waiting for a drain) cancels the request's context; one that sends its
// next request meanwhile does not, and that request is served whole.
func TestClientGone(t *testing.T) {
	waited := make(chan error, 4)
	_, addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.URL.Path == "/wait" {
			select {
			case <-r.Context().Done():
				waited <- r.Context().Err()
				return
			case <-time.After(300 * time.Millisecond):
				waited <- nil
			}
		}
		io.WriteString(w, r.URL.Path)
	}))
	req := "PUT /wait HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi"

	t.Run("closed", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		time.Sleep(50 * time.Millisecond)
		c.Close()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context: %v, want canceled", err)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		time.Sleep(50 * time.Millisecond) // the watch is reading now
		io.WriteString(c, "PUT /next HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
		if err := <-waited; err != nil {
			t.Fatalf("handler's context: %v, want not done", err)
		}
		br := bufio.NewReader(c)
		for _, want := range []string{"/wait", "/next"} {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			if string(b) != want {
				t.Fatalf("answer %q, want %q", b, want)
			}
		}
	})
}

// A handler that cuts the body's read (the gateway does, for a superseded
// write) gets a read error; the connection closes after its answer.
func TestReadDeadlineCutsBody(t *testing.T) {
	_, addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetReadDeadline(time.Now())
		_, err := io.ReadAll(r.Body)
		if err == nil {
			t.Error("body read whole after the deadline")
		}
		http.Error(w, "superseded", http.StatusConflict)
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "PUT /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\npart")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	if res.StatusCode != http.StatusConflict || !res.Close {
		t.Fatalf("status %d, close %v; want 409 and the connection closed", res.StatusCode, res.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF", err)
	}
}

// Shutdown closes idle connections at once, lets a request in progress
// finish, and refuses new connections.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	fast, addr := startFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	}))
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "PUT /fast HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
	idleBR := bufio.NewReader(idle)
	if res, err := http.ReadResponse(idleBR, nil); err != nil {
		t.Fatal(err)
	} else {
		io.ReadAll(res.Body)
	}
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "PUT /slow HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
	<-started

	shut := make(chan error, 1)
	go func() { shut <- fast.Shutdown(context.Background()) }()
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleBR.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want closed", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if string(b) != "done" || !res.Close {
		t.Fatalf("in-flight answer %q (close %v), want done and close", b, res.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		c.Close()
		if err == nil {
			t.Fatal("a new connection was served after Shutdown")
		}
	}
}

// A connection that sends nothing is closed after the read-header timeout
// (as net/http does), one idle between requests after the idle timeout,
// and a head that trickles in is cut at the read-header timeout from its
// first byte.
func TestTimeouts(t *testing.T) {
	const rht, idle = 300 * time.Millisecond, 1500 * time.Millisecond
	fast, err := New(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		ReadHeaderTimeout: rht, IdleTimeout: idle, ErrorLog: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go fast.Serve(ln)
	t.Cleanup(func() { fast.Close() })
	// closedAfter: how long until the server closed c (at most 10 s).
	closedAfter := func(c net.Conn, start time.Time) time.Duration {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := c.Read(make([]byte, 512)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("connection still open after 10s")
				}
				return time.Since(start)
			}
		}
	}
	dial := func() (net.Conn, time.Time) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, time.Now()
	}

	c, start := dial()
	if d := closedAfter(c, start); d > idle {
		t.Errorf("silent new connection closed after %v, want the read-header timeout %v", d, rht)
	}

	c, start = dial()
	io.WriteString(c, "PUT / HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n")
	if d := closedAfter(c, start); d < idle || d > idle+time.Second {
		t.Errorf("idle keep-alive connection closed after %v, want about the idle timeout %v", d, idle)
	}

	c, start = dial()
	go func() {
		for range 20 {
			if _, err := io.WriteString(c, "X-Slow: 1\r\n"[:1]); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if d := closedAfter(c, start); d > idle {
		t.Errorf("trickled head cut after %v, want the read-header timeout %v", d, rht)
	}
}
