package workerserver

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// A chunked body's trailer is read whole wherever it starts in the
// connection's read buffer. One that starts near the buffer's end makes
// bufio slide the buffered bytes to the start while its end is looked
// for: read from the first Peek's slice, it showed other bytes, or
// panicked (slice bounds out of range) in the handler's body read.
func TestTrailerReadAtBufferEnd(t *testing.T) {
	for _, pad := range []int{0, readBufferSize - 40, readBufferSize - 10, readBufferSize - 3} {
		data := strings.Repeat("x", pad) + "X-Check: v1\r\nX-Other: v2\r\n\r\nNEXT"
		br := bufio.NewReaderSize(strings.NewReader(data), readBufferSize)
		if pad > 0 {
			if _, err := br.Peek(pad); err != nil {
				t.Fatal(err)
			}
			if _, err := br.Discard(pad); err != nil {
				t.Fatal(err)
			}
		}
		req := &http.Request{}
		if err := readTrailer(br, req, 100); err != nil {
			t.Fatalf("pad %d: %v", pad, err)
		}
		if req.Trailer.Get("X-Check") != "v1" || req.Trailer.Get("X-Other") != "v2" {
			t.Fatalf("pad %d: trailer read as %v", pad, req.Trailer)
		}
		if rest, _ := br.Peek(4); string(rest) != "NEXT" {
			t.Fatalf("pad %d: after the trailer the connection reads %q; want NEXT", pad, rest)
		}
	}
}
