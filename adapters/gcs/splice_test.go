package gcs

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// streamSplice is the multipart edit as a body streams through it
// (editMultipart, then readAhead for a body of unknown length): what a
// small body read whole must give too.
func streamSplice(data []byte, boundary string, edit func([]byte) ([]byte, error)) ([]byte, error) {
	body, _, ahead, err := editMultipart(bufio.NewReaderSize(bytes.NewReader(data), 64<<10), boundary, edit)
	if err != nil {
		return nil, err
	}
	body, _ = readAhead(body, ahead)
	return io.ReadAll(body)
}

// spliceSeeds are multipart bodies read the usual way and the odd ones: a
// blank line before the delimiter, a delimiter-like line in the first
// part, LF-only lines, a body ending at the delimiter, no first part's end.
var spliceSeeds = []string{
	"--B\r\nContent-Type: application/json\r\n\r\n{\"name\":\"o\"}\r\n--B\r\nContent-Type: text/plain\r\n\r\nmedia\r\n--B--\r\n",
	"--B\r\nContent-Type: application/json\r\n\r\n{\"name\":\"o\",\"metadata\":{\"k\":\"v\"}}\r\n--B\r\n\r\nm\r\n--B--",
	"preamble\r\n\r\n--B\r\n\r\n{}\r\n--B\r\n\r\nm\r\n--B--\r\n",
	"--B\r\n\r\n{\"name\":\"o\"}\r\n--BX\r\n{}\r\n--B\r\n\r\nm\r\n--B--\r\n",
	"--B\n\n{\"name\":\"o\"}\n--B\n\nm\n--B--\n",
	"--B\r\n\r\n{\"name\":\"o\"}\r\n--B",
	"--B\r\n\r\n{\"name\":\"o\"}\r\n--B--",
	"--B\r\n\r\n{\"name\":\"o\"}",
	"--B\r\nContent-Type: application/json\r\n",
	"",
	"--B\r\n\r\n\r\n\r\n{}\r\n--B\r\n\r\n\r\n--B--\r\n",
	"--B\r\n\r\n{\"name\":\"o\"}\r\n--B \r\n\r\nm\r\n--B--\r\n",
}

// spliceEdit stamps a document as the gateway does, refusing one that is
// not JSON, so that edit's errors are compared too.
func spliceEdit(doc []byte) ([]byte, error) {
	return stampJSON(doc, "", "fencing-token", "42")
}

// A small body read whole is spliced to the same bytes, or refused with
// the same error, as the body streaming through editMultipart.
func TestSpliceMultipartStreams(t *testing.T) {
	bodies := append([]string(nil), spliceSeeds...)
	media := strings.Repeat("x", 4<<10)
	bodies = append(bodies,
		"--B\r\n\r\n{\"name\":\"o\"}\r\n--B\r\n\r\n"+media+"\r\n--B--\r\n",
		// Longer than smallUpload once stamped, and at the limit.
		"--B\r\n\r\n{}\r\n--B\r\n\r\n"+strings.Repeat("y", smallUpload-40)+"\r\n--B--\r\n",
		"--B\r\n\r\n{}\r\n--B\r\n\r\n"+strings.Repeat("y", smallUpload-60)+"\r\n--B--\r\n",
	)
	for _, in := range bodies {
		if len(in) > smallUpload {
			t.Fatalf("a test body of %d bytes: at most smallUpload", len(in))
		}
		checkSplice(t, []byte(in), "B")
	}
}

func checkSplice(t *testing.T, in []byte, boundary string) {
	t.Helper()
	want, werr := streamSplice(in, boundary, spliceEdit)
	got, err := spliceMultipart(in, boundary, spliceEdit)
	if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() || !bytes.Equal(got, want) {
		t.Fatalf("body %q:\n whole  %q, %v\n stream %q, %v", in, got, err, want, werr)
	}
}

func FuzzSpliceMultipart(f *testing.F) {
	for _, s := range spliceSeeds {
		f.Add([]byte(s), "B")
	}
	f.Fuzz(func(t *testing.T, in []byte, boundary string) {
		if len(in) > smallUpload || boundary == "" {
			return
		}
		checkSplice(t, in, boundary)
	})
}

// readSmall holds a body of at most smallUpload bytes whole, of a known
// length or not; a longer one, and one whose reading failed, is read
// again from its start by src, the read error at its place.
func TestReadSmall(t *testing.T) {
	for _, n := range []int{0, 1, 4 << 10, smallUpload, smallUpload + 1, 3 * smallUpload} {
		in := bytes.Repeat([]byte("abcdefg"), n/7+1)[:n]
		for _, length := range []int64{-1, int64(n)} {
			r := &http.Request{Body: io.NopCloser(bytes.NewReader(in)), ContentLength: length}
			data, src, release := readSmall(r, nil)
			if (data != nil) != (n <= smallUpload) {
				t.Fatalf("%d bytes, length %d: read whole %v", n, length, data != nil)
			}
			got := data
			if data == nil {
				got, _ = io.ReadAll(src)
			}
			if !bytes.Equal(got, in) {
				t.Fatalf("%d bytes, length %d: %d bytes read", n, length, len(got))
			}
			if release != nil {
				release()
			}
		}
	}
	gone := errors.New("worker gone")
	r := &http.Request{Body: io.NopCloser(io.MultiReader(strings.NewReader("part"), errReader{gone})), ContentLength: -1}
	data, src, _ := readSmall(r, nil)
	if data != nil {
		t.Fatal("a failing body read whole")
	}
	if got, err := io.ReadAll(src); string(got) != "part" || !errors.Is(err, gone) {
		t.Fatalf("failing body: read %q, err %v; want \"part\", %v", got, err, gone)
	}
}
