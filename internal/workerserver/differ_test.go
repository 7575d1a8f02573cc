package workerserver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seen is a request as a handler saw it: what the gateway would forward.
type seen struct {
	Method, URI, Proto, Host string
	Header                   http.Header
	ContentLength            int64
	TransferEncoding         []string
	Trailer                  http.Header // after the handler
	Body                     string      // as read by /echo
	Close                    bool
}

// recorder keeps the requests a handler saw, in order.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (rc *recorder) len() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

func (rc *recorder) take() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r := rc.reqs
	rc.reqs = nil
	return r
}

// wrap records each request h serves; /echo's body as h reads it.
func (rc *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		if r.URL.Path == "/echo" {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(r.Body, &body), r.Body}
		}
		h.ServeHTTP(w, r)
		s := seen{Method: r.Method, URI: r.RequestURI, Proto: r.Proto, Host: r.Host, Header: r.Header.Clone(),
			ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding, Trailer: r.Trailer.Clone(), Body: body.String(), Close: r.Close}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, s)
		rc.mu.Unlock()
	})
}

// pair is net/http's server and workerserver (in front of its own net/http
// server) with the same settings and handler.
type pair struct {
	stock, fast         string // addresses
	stockReqs, fastReqs recorder
	fastCount           atomic.Int64
}

// startPair starts a pair; maxHeader is both servers' MaxHeaderBytes
// (0: net/http's default).
func startPair(tb testing.TB, maxHeader int) *pair {
	tb.Helper()
	p := &pair{}
	var stockCount atomic.Int64
	stock := &http.Server{Handler: p.stockReqs.wrap(handler(&stockCount)), ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes: maxHeader, ErrorLog: quietLog()}
	fb := &http.Server{Handler: p.fastReqs.wrap(handler(&p.fastCount)), ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes: maxHeader, ErrorLog: quietLog()}
	fast, err := New(fb)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range []struct {
		serve func(net.Listener) error
		addr  *string
	}{{stock.Serve, &p.stock}, {fast.Serve, &p.fast}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		*s.addr = ln.Addr().String()
		go s.serve(ln)
	}
	tb.Cleanup(func() {
		stock.Close()
		fast.Close()
	})
	return p
}

// exchangeSteps writes each step to addr, waiting gap after each, then
// half-closes and reads every answer (as exchange, tolerating a server
// that closes while the client still writes).
func exchangeSteps(tb testing.TB, addr string, steps []string, gap time.Duration, heads []string) []answer {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, s := range steps {
		if _, err := io.WriteString(c, s); err != nil {
			break
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	var out []answer
	for i := 0; ; i++ {
		var req *http.Request
		if i < len(heads) {
			req = &http.Request{Method: heads[i]}
		}
		// The connection's end, a FIN or a reset (net/http closes with
		// unread request bytes at once, the fast path half-closes first).
		// ReadResponse calls both an unexpected EOF.
		if _, err := br.Peek(1); err == io.EOF || err != nil && strings.Contains(err.Error(), "connection reset") {
			break
		}
		res, err := http.ReadResponse(br, req)
		if err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "connection reset") {
				out = append(out, answer{Err: "read: " + err.Error()})
			}
			break
		}
		b, err := io.ReadAll(res.Body)
		a := answer{Status: res.StatusCode, Header: res.Header, Body: string(b), Trailer: res.Trailer, ConnDone: res.Close}
		if err != nil {
			a.Err = "body: " + err.Error()
		}
		delete(a.Header, "Date")
		out = append(out, a)
		if err != nil {
			break
		}
	}
	normalize(out)
	return out
}

// compare runs steps on both servers of p and fails on any difference in
// the answers or in the requests the handlers saw.
func (p *pair) compare(tb testing.TB, steps []string, gap time.Duration, heads []string) (fastServed int64) {
	return p.compareTolerant(tb, steps, gap, heads, false)
}

// compareTolerant is compare; with later431, an answer 431 from workerserver
// where net/http served a later request (see
// TestMaxHeaderBytesMatchesNetHTTP) ends the comparison there.
func (p *pair) compareTolerant(tb testing.TB, steps []string, gap time.Duration, heads []string, later431 bool) (fastServed int64) {
	tb.Helper()
	p.stockReqs.take()
	p.fastReqs.take()
	before := p.fastCount.Load()
	want := exchangeSteps(tb, p.stock, steps, gap, heads)
	got := exchangeSteps(tb, p.fast, steps, gap, heads)
	fastServed = p.fastCount.Load() - before
	if later431 {
		for i := range min(len(got), len(want)) {
			if i > 0 && got[i].Status == http.StatusRequestHeaderFieldsTooLarge && want[i].Status != got[i].Status &&
				reflect.DeepEqual(got[:i], want[:i]) {
				// Up to there the same; net/http may have served more.
				for range 50 {
					if p.stockReqs.len() >= p.fastReqs.len() {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				sReqs, fReqs := p.stockReqs.take(), p.fastReqs.take()
				if len(sReqs) < len(fReqs) || !reflect.DeepEqual(fReqs, sReqs[:len(fReqs)]) {
					tb.Errorf("requests served differ for %s\n workerserver:  %s\n net/http: %s", short(steps), short(fReqs), short(sReqs))
				}
				return fastServed
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		tb.Errorf("answers differ for %s\n workerserver:  %s\n net/http: %s", short(steps), short(got), short(want))
	}
	// A handler may record just after its answer was read.
	for range 50 {
		if p.stockReqs.len() == p.fastReqs.len() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	sReqs, fReqs := p.stockReqs.take(), p.fastReqs.take()
	if !reflect.DeepEqual(fReqs, sReqs) {
		tb.Errorf("requests served differ for %s\n workerserver:  %s\n net/http: %s", short(steps), short(fReqs), short(sReqs))
	}
	return fastServed
}

// A MaxHeaderBytes below the read buffer holds on the fast path too: a
// head larger than it is net/http's to judge (431 beyond its slack of
// 4 KiB, served within it), even when it arrives whole at once.
func TestMaxHeaderBytesMatchesNetHTTP(t *testing.T) {
	p := startPair(t, 1024)
	head := func(n int) string {
		return "PUT /cl HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", n) + "\r\nContent-Length: 0\r\n\r\n"
	}
	for _, tc := range []struct {
		name string
		raw  string
		fast int64
	}{
		{"within the limit", head(500), 1},
		{"above the limit, within the slack", head(2000), 0},
		{"above limit and slack", head(6000), 0},
		// Not compared: a later request's head above the limit on one
		// connection. net/http counts the bytes it reads from the socket
		// after the previous request, so its answer depends on how much of
		// that head its 4 KiB reads had already taken; the fast path hands
		// such a head over and net/http judges it whole (431 above the
		// slack): stricter, never laxer.
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := p.compare(t, []string{tc.raw}, 0, nil); n != tc.fast {
				t.Errorf("fast path served %d requests, want %d", n, tc.fast)
			}
		})
	}
}

// A stray CRLF after a POST body is skipped, as net/http skips it, also
// when it arrives while the request runs and the client-gone watch reads
// it: the next request is served on the same connection.
func TestPOSTCRLFReadByWatch(t *testing.T) {
	p := startPair(t, 0)
	post := "POST /slow HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi"
	next := "PUT /cl HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n"
	// /slow runs past the watch's delay, so the watch reads the CRLF.
	for _, tc := range []struct {
		name  string
		steps []string
	}{
		{"CRLF alone", []string{post, "\r\n", next}},
		{"CRLF with the next request", []string{post, "\r\n" + next}},
		{"one LF", []string{post, "\n", next}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := p.compare(t, tc.steps, 30*time.Millisecond, nil); n != 2 {
				t.Errorf("fast path served %d requests, want 2", n)
			}
		})
	}
}

// FuzzMatchesNetHTTP sends the same bytes to net/http's server and to
// workerserver in front of one: the answers a client reads (status, header but
// Date, body, trailers, the connection's end) and the requests the handler
// saw (what the gateway would forward) must be the same. small selects a
// MaxHeaderBytes of 1 KiB on both, split sends the input in two steps
// with a pause between (the second arriving while the first request runs).
func FuzzMatchesNetHTTP(f *testing.F) {
	put := func(path, extra, body string) string {
		return fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: gw\r\n%sContent-Length: %d\r\n\r\n%s", path, extra, len(body), body)
	}
	for _, s := range []string{
		put("/cl", "", "x"),
		put("/echo", "Fencing-Token: 7\r\n", "0123456789"),
		put("/noread", "", "0123456789") + put("/cl", "", ""),
		put("/echo", "", "one") + put("/echo", "", "two"),
		"POST /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi\r\n" + put("/cl", "", ""),
		chunkedReq("/echo", "", "3\r\nabc\r\n0\r\n\r\n"),
		chunkedReq("/echo", "", "3;x=1\r\nabc\r\n00a\r\n0123456789\r\n0\r\nFencing-Token: 9\r\nX-U: a\r\n b\r\n\r\n") + put("/cl", "", ""),
		chunkedReq("/noread", "", "3\r\nabc\r\n0\r\n\r\n") + chunkedReq("/echo", "", "1\r\nx\r\n0\r\n\r\n"),
		chunkedReq("/echo", "Trailer: X-T\r\n", "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"),
		chunkedReq("/echo", "", "2\r\nab\r\n0\r\nX-A: 1\r\nbad\r\n\r\n") + put("/cl", "", ""),
		chunkedReq("/slow", "", "2\r\nhi\r\n0\r\n\r\n") + chunkedReq("/echo", "", "1\r\nx\r\n0\r\n\r\n"),
		"PUT /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\n" + put("/cl", "", ""),
		"PUT /echo HTTP/1.1\r\nHost: gw\r\nX-A: 1\r\n 2\r\nContent-Length: 2\r\n\r\nhi",
		"GET /ctx HTTP/1.1\r\nHost: gw\r\n\r\nHEAD /small HTTP/1.1\r\nHost: gw\r\n\r\n",
		put("/trailer", "", "") + put("/flush", "", "") + put("/204", "", "x"),
		"PUT /cl HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 3000) + "\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s), false, false)
	}
	f.Add([]byte(put("/cl", "X-Big: "+strings.Repeat("a", 6000)+"\r\n", "")), true, false)
	f.Add([]byte("POST /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi"+"\r\n"+put("/cl", "", "")), false, true)
	f.Add([]byte(chunkedReq("/slow", "", "2\r\nhi\r\n0\r\n\r\n")+put("/echo", "", "x")), false, true)
	f.Add([]byte(chunkedReq("/echo", "", "2\r\nhi\r\n0\r\nX-T: 1\r\n\r\n")), true, true)
	// Trailers that start near the end of the connection's 8 KiB read
	// buffer, so that finding their end refills it.
	for _, n := range []int{8100, 8140, 8160} {
		f.Add([]byte(chunkedReq("/echo", "", fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Check: v1\r\nX-Other: v2\r\n\r\n", n, strings.Repeat("b", n)))+put("/cl", "", "")), false, false)
	}
	pairs := [2]*pair{startPair(f, 0), startPair(f, 1024)}
	f.Fuzz(func(t *testing.T, raw []byte, small, split bool) {
		if len(raw) > 32<<10 {
			raw = raw[:32<<10]
		}
		i := 0
		if small {
			i = 1
		}
		steps := []string{string(raw)}
		var gap time.Duration
		if split {
			// Split after the first head and body of known length, where
			// a second step is most telling.
			cut := len(raw) / 2
			if end := bytes.Index(raw, []byte("\r\n\r\n")); end > 0 {
				cut = end + 4
				// Byte by byte: bytes.ToLower turns invalid UTF-8 into
				// three-byte runes, and lower's offsets must be raw's.
				lower := make([]byte, end)
				for k, c := range raw[:end] {
					if 'A' <= c && c <= 'Z' {
						c += 'a' - 'A'
					}
					lower[k] = c
				}
				if bytes.Contains(lower, []byte("transfer-encoding: chunked")) {
					// After the last chunk and an empty trailer.
					if k := bytes.Index(raw[cut:], []byte("\r\n0\r\n\r\n")); k >= 0 {
						cut += k + 7
					}
				} else if j := bytes.Index(lower, []byte("content-length: ")); j > 0 {
					var n int
					if _, err := fmt.Sscanf(string(raw[j+16:end]), "%d", &n); err == nil && n >= 0 {
						cut = min(cut+n, len(raw))
					}
				}
			}
			steps, gap = []string{string(raw[:cut]), string(raw[cut:])}, 30*time.Millisecond
		}
		heads := headMethods(raw)
		pairs[i].compareTolerant(t, steps, gap, heads, small)
	})
}

// headMethods is the request methods in raw, in order, as far as a client
// needs them (a HEAD answer has no body).
func headMethods(raw []byte) []string {
	var ms []string
	for line := range bytes.SplitSeq(raw, []byte("\r\n")) {
		if m, _, ok := bytes.Cut(line, []byte(" ")); ok && slices.Contains([]string{"GET", "PUT", "POST", "HEAD", "DELETE", "PATCH", "OPTIONS"}, string(m)) {
			ms = append(ms, string(m))
		}
	}
	return ms
}

// short formats v for a failure message, cut to a readable length.
func short(v any) string {
	s := fmt.Sprintf("%+q", v)
	if _, ok := v.([]string); !ok {
		s = fmt.Sprintf("%+v", v)
	}
	if len(s) > 1500 {
		s = s[:1500] + "..."
	}
	return s
}
