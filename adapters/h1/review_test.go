package h1

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawUpstream is a hostile or buggy upstream on a raw TCP listener: serve
// runs on each accepted connection.
func rawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readHead reads a request head (up to its blank line).
func readHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if line == "\r\n" {
			return b.String(), nil
		}
	}
}

// An upstream that refuses an Expect: 100-continue request with a final
// answer whose body arrives in several pieces (S3's XML error documents,
// a 412 with an explanation): the answer must reach the caller whole.
// The body writer, told not to send the body, must not close the
// connection the answer is still being read from.
func TestReviewExpectRefusalAnswerNotCut(t *testing.T) {
	const n = 256 << 10
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 262144\r\n\r\n")
		piece := bytes.Repeat([]byte("e"), 4<<10)
		for i := 0; i < n/len(piece); i++ {
			if _, err := c.Write(piece); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		io.Copy(io.Discard, br)
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	body := &countingBody{r: bytes.NewReader(make([]byte, 1<<20))}
	req, _ := http.NewRequest("PUT", url+"/b/k", body)
	req.ContentLength = 1 << 20
	req.Header.Set("Expect", "100-continue")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d; want 403", resp.StatusCode)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || len(got) != n {
		t.Fatalf("answer body: %d of %d bytes, err %v", len(got), n, err)
	}
	if r := body.n.Load(); r != 0 {
		t.Fatalf("%d body bytes read from the worker; want 0", r)
	}
}

// An upstream that answers a streamed write early (413, 403, before
// reading the body) while the worker's body is stalled: the caller gets
// the whole answer at once, as from net/http's client, not only once the
// worker sends more of its body (or the route's timeout fires).
func TestReviewEarlyAnswerNotHeldByStalledBody(t *testing.T) {
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 5\r\n\r\nlarge")
		io.Copy(io.Discard, br)
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write(make([]byte, 8<<10)) // then the worker stalls
	req, _ := http.NewRequest("PUT", url+"/b/k", pr)
	req.ContentLength = 1 << 20
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.status != 413 || r.body != "large" {
			t.Fatalf("%d %q %v", r.status, r.body, r.err)
		}
	case <-time.After(3 * time.Second):
		pw.CloseWithError(io.ErrUnexpectedEOF) // unblock the writer
		<-done
		t.Fatal("the early answer waited for the stalled request body")
	}
}

// Header fields net/http's client refuses to send (a name that is not a
// token, a value with control bytes) are refused here too, rather than
// dropped or sent: a NUL in a value reaches the upstream as is (C servers
// may cut the value there), and a misspelt injected credential would be
// dropped without a word.
func TestReviewInvalidHeaderFieldsRefused(t *testing.T) {
	got := make(chan string, 4)
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		got <- head
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	for _, h := range []struct{ k, v string }{
		{"X-Value", "a\x00b"},
		{"X-Value", "a\x01b"},
		{"X-Bad Name", "v"},
		{"X-Bad:Name", "v"},
	} {
		req, _ := http.NewRequest("PUT", url+"/b/k", strings.NewReader("x"))
		req.Header[h.k] = []string{h.v}
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			head := ""
			select {
			case head = <-got:
			default:
			}
			t.Errorf("%q: %q: sent; upstream got %q", h.k, h.v, head)
		}
	}
	// A value net/http sends (tab, obs-text) still goes.
	req, _ := http.NewRequest("PUT", url+"/b/k", strings.NewReader("x"))
	req.Header.Set("X-Value", "a\tb\xff")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// An upstream that sends an interim answer other than 100 Continue (103
// Early Hints) to an Expect: 100-continue request and then reads the body
// without ever sending 100: the body still goes after the Expect timeout,
// as from net/http's client (RFC 9110 §10.1.1: a client does not wait
// indefinitely), instead of waiting for the route's timeout.
func TestReviewExpectEarlyHintsThenBody(t *testing.T) {
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
		_ = head
		b := make([]byte, 5)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"+string(b))
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("hello")); pw.Close() }()
	req, _ := http.NewRequest("PUT", url+"/b/k", pr)
	req.ContentLength = 5
	req.Header.Set("Expect", "100-continue")
	done := make(chan string, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	select {
	case got := <-done:
		if got != "hello" {
			t.Fatalf("got %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body waited for a 100 Continue after 103 past the Expect timeout")
	}
}
