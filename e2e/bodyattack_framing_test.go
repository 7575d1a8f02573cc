package e2e

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// The attacker's afternoon on request bodies: one body that names the
// objects a request writes (an S3 DeleteObjects, a GCS compose), sent in
// every framing HTTP/1.1 allows or a client can fake, against a route with
// max_body_bytes. The gateway reads the body before the fence; if it read
// it otherwise than the store (no body, a shorter one, the wrong chunk),
// a stale token would be admitted for objects the store then changes. The
// oracle is the store's durable state and the victim's fence, read
// directly, never the gateway's answer alone.

// bodyLimit is the max_body_bytes of the body-attack routes (but for a
// store that says another, bodyStore.limit).
const bodyLimit = 2048

// framing is one way to put a request's body on the wire.
type framing struct {
	name string
	// size: the body the row sends, padded to the route's limit
	// (sizeLimit), one byte over it (sizeOver), or as it is (sizeNatural).
	size int
	// send writes the request (head: its request line and headers, no
	// blank line) to c, and closes c's write side if the row needs it.
	send func(t *testing.T, c net.Conn, head string, body []byte)
	// want: how the gateway must take it.
	want framingWant
	// more: the row leaves bytes after the request, which the gateway
	// reads as further requests, and closes its side: every answer until
	// the connection ends is read (otherwise the first final one).
	more bool
}

const (
	sizeNatural = iota
	sizeLimit
	sizeOver
)

type framingWant int

const (
	// readWhole: the body is read as sent, so the victim it names is
	// fenced: a stale token is refused stale (409), nothing changes.
	readWhole framingWant = iota
	// tooLarge: refused 413 before the fence with any token.
	tooLarge
	// broken: no complete request: refused (any answer but 2xx, or
	// none) with any token, before the fence.
	broken
	// staleRefused: the gateway and the store read the same bytes as
	// whatever request they make (HTTP/1.0 without a length has no body,
	// for the gateway as for any server, and the bytes after the head
	// are another, malformed request; a bare LF where CRLF belongs is
	// read alike or refused): the stale token is refused, nothing
	// changes. A fresh token's request is the holder's to make.
	staleRefused
)

func chunked(body []byte, ext, trailer string) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(len(body), 700)
		fmt.Fprintf(&b, "%x%s\r\n%s\r\n", n, ext, body[:n])
		body = body[n:]
	}
	return b.String() + "0\r\n" + trailer + "\r\n"
}

func writeAll(t *testing.T, c net.Conn, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if _, err := io.WriteString(c, p); err != nil {
			t.Logf("write: %v", err) // the gateway may close early (a refusal)
			return
		}
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// framings is the table: every row keeps the request line and headers of
// the signed request and changes only how the body goes on the wire.
func framings() []framing {
	withLength := func(t *testing.T, c net.Conn, head string, body []byte) {
		writeAll(t, c, head, fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)), string(body))
	}
	chunkedWith := func(ext, trailer, extraHead string) func(t *testing.T, c net.Conn, head string, body []byte) {
		return func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, extraHead+"Transfer-Encoding: chunked\r\n\r\n", chunked(body, ext, trailer))
		}
	}
	return []framing{
		{name: "with a length", send: withLength},
		{name: "with a length, at the limit", size: sizeLimit, send: withLength},
		{name: "with a length, one byte over the limit", size: sizeOver, send: withLength, want: tooLarge},
		{name: "chunked", send: chunkedWith("", "", "")},
		{name: "chunked, at the limit", size: sizeLimit, send: chunkedWith("", "", "")},
		{name: "chunked, one byte over the limit", size: sizeOver, send: chunkedWith("", "", ""), want: tooLarge},
		{name: "chunked, first chunks fit and the last does not", size: sizeOver, want: tooLarge,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				// The chunks within the limit go first, the rest after a
				// pause: a reader that stops at the limit has read a
				// body that is whole as far as it knows.
				first := len(body) - 10
				writeAll(t, c, head, "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x\r\n%s\r\n", first, body[:first]))
				time.Sleep(50 * time.Millisecond)
				writeAll(t, c, chunked(body[first:], "", ""))
			}},
		{name: "chunked with extensions", send: chunkedWith(`;name="x";ext=1`, "", "")},
		{name: "chunked with an undeclared trailer", send: chunkedWith("", "Content-Type: text/plain\r\nX-Fencing-Note: x\r\n", "")},
		{name: "chunked with a declared trailer", send: chunkedWith("", "X-Fencing-Note: x\r\n", "Trailer: X-Fencing-Note\r\n")},
		{name: "Content-Length and Transfer-Encoding (chunked wins)", send: chunkedWith("", "", "Content-Length: 3\r\n")},
		{name: "Content-Length and Transfer-Encoding, over the limit", size: sizeOver, send: chunkedWith("", "", "Content-Length: 3\r\n"), want: tooLarge},
		{name: "two Content-Length headers, one value", send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n\r\n", len(body), len(body)), string(body))
		}},
		{name: "two Content-Length headers, two values", want: broken, more: true, send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n\r\n", len(body)/2, len(body)), string(body))
			closeWrite(c)
		}},
		{name: "Transfer-Encoding in another case", send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, "Transfer-Encoding: CHUNKED\r\n\r\n", chunked(body, "", ""))
		}},
		{name: "Transfer-Encoding gzip, chunked", want: broken, more: true, send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, "Transfer-Encoding: gzip, chunked\r\n\r\n", chunked(body, "", ""))
			closeWrite(c)
		}},
		{name: "Transfer-Encoding twice", want: broken, more: true, send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", chunked(body, "", ""))
			closeWrite(c)
		}},
		{name: "a zero chunk before the body's end", want: broken, more: true, send: func(t *testing.T, c net.Conn, head string, body []byte) {
			// The body ends at the zero chunk, halfway: the rest is read
			// as another request.
			half := len(body) / 2
			writeAll(t, c, head, "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", half, body[:half]), chunked(body[half:], "", ""))
			closeWrite(c)
		}},
		{name: "chunk sizes with leading zeros", send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%08x\r\n%s\r\n00000\r\n\r\n", len(body), body))
		}},
		{name: "chunk size with 0x", want: broken, more: true, send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("0x%x\r\n%s\r\n0\r\n\r\n", len(body), body))
			closeWrite(c)
		}},
		{name: "chunked with bare LF", want: staleRefused, more: true, send: func(t *testing.T, c net.Conn, head string, body []byte) {
			writeAll(t, c, head, "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x\n%s\n0\n\n", len(body), body))
			closeWrite(c)
		}},
		{name: "Expect: 100-continue, the body after the go-ahead",
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, head, fmt.Sprintf("Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body)))
				// The body goes whether or not a 100 came (a client
				// that does not wait); the answer reader skips a 100.
				time.Sleep(50 * time.Millisecond)
				writeAll(t, c, string(body))
			}},
		{name: "Expect: 100-continue, over the limit", size: sizeOver, want: tooLarge,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, head, fmt.Sprintf("Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body)))
			}},
		{name: "Content-Length shorter than the body", want: broken, more: true,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				// The rest of the body is read as the next request.
				writeAll(t, c, head, fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)/2), string(body))
				closeWrite(c)
			}},
		{name: "Content-Length longer than the body, then close", want: broken, more: true,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, head, fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)+100), string(body))
				closeWrite(c)
			}},
		{name: "HTTP/1.0 with no length, then close", want: staleRefused, more: true,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, strings.Replace(head, " HTTP/1.1\r\n", " HTTP/1.0\r\n", 1), "\r\n", string(body))
				closeWrite(c)
			}},
		{name: "HTTP/1.0 with Transfer-Encoding (ignored: no body)", want: staleRefused, more: true,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, strings.Replace(head, " HTTP/1.1\r\n", " HTTP/1.0\r\n", 1), "Transfer-Encoding: chunked\r\n\r\n", chunked(body, "", ""))
				closeWrite(c)
			}},
		{name: "client vanishes mid-body, with a length", want: broken,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, head, fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)), string(body[:len(body)/2]))
				c.Close()
			}},
		{name: "client vanishes mid-body, chunked", want: broken,
			send: func(t *testing.T, c net.Conn, head string, body []byte) {
				writeAll(t, c, head, "Transfer-Encoding: chunked\r\n\r\n", chunked(body, "", "")[:len(body)/2])
				c.Close()
			}},
	}
}

// framingNamed is the framing of the table with that name.
func framingNamed(t *testing.T, name string) framing {
	t.Helper()
	for _, f := range framings() {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no framing %q", name)
	return framing{}
}

// wireHead is req's request line and headers as they go on the wire,
// without the blank line that ends them and without a body framing.
func wireHead(req *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, req.URL.RequestURI(), req.URL.Host)
	req.Header.Write(&b)
	return b.String()
}

// exchange sends one framing of req and body to the gateway and returns
// the final answers' statuses (several when the framing leaves bytes the
// gateway reads as another request; none when the client vanished or the
// gateway closed without one).
func exchange(t *testing.T, gw string, f framing, req *http.Request, body []byte) []int {
	t.Helper()
	u, _ := url.Parse(gw)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	f.send(t, c, wireHead(req), body)
	var statuses []int
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return statuses
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusContinue {
			continue
		}
		statuses = append(statuses, resp.StatusCode)
		if resp.Close || !f.more {
			return statuses
		}
	}
}

// bodyStore is one store's side of the framing table.
type bodyStore struct {
	gw string
	// request is the signed request (no Content-Length: the framing
	// sets it) that writes the victim, with token, and body.
	request func(t *testing.T, token int64, body []byte) *http.Request
	// body is the request's body naming the victim, padded to n bytes
	// (0: as it is).
	body func(n int) []byte
	// state is the store's durable state, read directly.
	state func(t *testing.T) []string
	// fence is the victim's highest token, from the admin API.
	fence func(t *testing.T) int64
	high  int64 // the victim's fence before the table
	limit int   // the route's max_body_bytes (0: bodyLimit)
}

func (s bodyStore) max() int { return cmp.Or(s.limit, bodyLimit) }

// runFramings sends every framing with a stale token (below the victim's
// fence) and, where the gateway must refuse before the fence, with a
// fresh one (above it): the store must be unchanged and the victim's
// fence where it was.
func runFramings(t *testing.T, s bodyStore) {
	before := s.state(t)
	for _, f := range framings() {
		t.Run(f.name, func(t *testing.T) {
			var body []byte
			switch f.size {
			case sizeNatural:
				body = s.body(0)
			case sizeLimit:
				body = s.body(s.max())
			case sizeOver:
				body = s.body(s.max() + 1)
			}
			tokens := []int64{s.high - 1}
			if f.want != readWhole && f.want != staleRefused {
				tokens = append(tokens, s.high+1)
			}
			for _, token := range tokens {
				got := exchange(t, s.gw, f, s.request(t, token, body), body)
				var ok bool
				switch f.want {
				case readWhole:
					ok = len(got) == 1 && got[0] == http.StatusConflict
				case tooLarge:
					ok = len(got) >= 1 && got[0] == http.StatusRequestEntityTooLarge
				case broken, staleRefused:
					ok = true
					for _, st := range got {
						ok = ok && st >= 400
					}
				}
				if !ok {
					t.Errorf("token %d: answers %v; want %s", token, got, [...]string{"409 (the victim fenced)", "413", "no 2xx", "no 2xx"}[f.want])
				}
			}
			// A vanished client's request may still be in the gateway
			// for a moment.
			time.Sleep(20 * time.Millisecond)
			if after := s.state(t); !slices.Equal(before, after) {
				t.Errorf("the store changed:\n%s", stateDiff(before, after))
			}
			if h := s.fence(t); h != s.high {
				t.Errorf("the victim's fence is %d; want %d (refused before the fence)", h, s.high)
			}
		})
	}
	appliedAtLimit(t, s)
}

// appliedAtLimit is the table's control: the body at the limit, chunked,
// with a fresh token is admitted and applied by the store (the refusals
// above were not the store's own), and the victim's fence moves to it.
func appliedAtLimit(t *testing.T, s bodyStore) {
	t.Helper()
	before := s.state(t)
	f := framingNamed(t, "chunked, at the limit")
	body := s.body(s.max())
	if got := exchange(t, s.gw, f, s.request(t, s.high+1, body), body); len(got) != 1 || got[0] >= 300 {
		t.Fatalf("%s with token %d: answers %v; want it applied", f.name, s.high+1, got)
	}
	if slices.Equal(before, s.state(t)) {
		t.Fatalf("%s with token %d: answered 2xx but the store did not change", f.name, s.high+1)
	}
	if h := s.fence(t); h != s.high+1 {
		t.Fatalf("the victim's fence is %d after an admitted write with token %d", h, s.high+1)
	}
}
