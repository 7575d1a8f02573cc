package s3

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// newTestChain starts the test signer's aws-chunked chain (testenv's, written
// out apart from chunkSigner so the test does not check the code against
// itself) for secret at 2026-01-02T03:04:05Z in us-east-1.
func newTestChain(secret, seed string) *testenv.ChunkChain {
	return testenv.NewChunkChain(secret, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "us-east-1", seed)
}

// encodeChunked signs chunks (the last one empty) and, if trailer is set,
// the trailer "name:value"; it returns the body and the offset just after
// the last data byte.
func encodeChunked(c *testenv.ChunkChain, chunks [][]byte, trailer string) ([]byte, int) {
	var b bytes.Buffer
	lastData := 0
	for _, d := range chunks {
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", len(d), c.Chunk(d))
		b.Write(d)
		if len(d) > 0 {
			lastData = b.Len()
			b.WriteString("\r\n")
		}
	}
	if trailer != "" {
		sig := c.Trailer(trailer)
		fmt.Fprintf(&b, "%s\r\nx-amz-trailer-signature:%s\r\n", trailer, sig)
	}
	b.WriteString("\r\n")
	return b.Bytes(), lastData
}

// decodeChunked verifies a signed aws-chunked body against c and returns
// its data and trailer.
func decodeChunked(t *testing.T, c *testenv.ChunkChain, body []byte, withTrailer bool) ([]byte, string) {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(body))
	line := func() string {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("output ends early: %v", err)
		}
		return strings.TrimSuffix(l, "\r\n")
	}
	var data []byte
	for {
		size, sig, _ := strings.Cut(line(), ";chunk-signature=")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q", size)
		}
		d := make([]byte, n)
		io.ReadFull(r, d)
		if want := c.Chunk(d); sig != want {
			t.Fatalf("chunk of %d bytes signed %s; want %s (the gateway's chain)", n, sig, want)
		}
		data = append(data, d...)
		if n == 0 {
			break
		}
		if l := line(); l != "" {
			t.Fatalf("chunk data not followed by CRLF: %q", l)
		}
	}
	trailer := ""
	if withTrailer {
		trailer = line()
		name, sig, _ := strings.Cut(line(), ":")
		if want := c.Trailer(trailer); name != "x-amz-trailer-signature" || sig != want {
			t.Fatalf("trailer signature %s:%s; want %s (the gateway's chain)", name, sig, want)
		}
	}
	if l := line(); l != "" {
		t.Fatalf("body does not end with an empty line: %q", l)
	}
	if rest, _ := io.ReadAll(r); len(rest) > 0 {
		t.Fatalf("%d bytes after the end of the body", len(rest))
	}
	return data, trailer
}

// The signed aws-chunked body with and without a checksum trailer
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]): re-signed chunk by chunk
// with the gateway's key and seed, same length; any bad signature (a data
// chunk, the final chunk, the trailer) ends the body before the last data
// byte is passed on, so the upstream can never hold the whole object.
func TestChunkSignerReSigns(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 300) // 4800 bytes
	chunks := [][]byte{payload[:2048], payload[2048:4096], payload[4096:], nil}
	const trailer = "x-amz-checksum-crc32:AAAAAA=="
	tests := []struct {
		name    string
		trailer bool
		mangle  func(body []byte) []byte
		wantErr string // "" for a valid body
	}{
		{name: "signed", trailer: false},
		{name: "signed trailer", trailer: true},
		{name: "tampered data chunk", trailer: false, mangle: func(b []byte) []byte {
			return bytes.Replace(b, []byte("0123"), []byte("X123"), 1)
		}, wantErr: "SignatureDoesNotMatch"},
		{name: "tampered last data chunk", trailer: true, mangle: func(b []byte) []byte {
			i := bytes.LastIndex(b, []byte("cdef"))
			return append(append(b[:i:i], "CDEF"...), b[i+4:]...)
		}, wantErr: "SignatureDoesNotMatch"},
		{name: "bad final chunk signature", trailer: false, mangle: func(b []byte) []byte {
			i := bytes.LastIndex(b, []byte("0;chunk-signature=")) + len("0;chunk-signature=")
			b[i] ^= 1
			return b
		}, wantErr: "SignatureDoesNotMatch"},
		{name: "tampered trailer value", trailer: true, mangle: func(b []byte) []byte {
			return bytes.Replace(b, []byte("AAAAAA=="), []byte("AAAAAB=="), 1)
		}, wantErr: "SignatureDoesNotMatch"},
		{name: "trailer signature missing", trailer: true, mangle: func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-trailer-signature:"))
			return append(b[:i:i], "\r\n"...)
		}, wantErr: "SignatureDoesNotMatch"},
		{name: "trailer without -TRAILER", trailer: false, mangle: func(b []byte) []byte {
			return append(b[:len(b)-2:len(b)-2], trailer+"\r\n\r\n"...)
		}, wantErr: "InvalidRequest"},
		{name: "truncated", trailer: true, mangle: func(b []byte) []byte {
			return b[:len(b)-40]
		}, wantErr: "InvalidRequest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := ""
			if tc.trailer {
				tr = trailer
			}
			in, lastData := encodeChunked(newTestChain("worker-secret", "seedworker"), chunks, tr)
			if tc.mangle != nil {
				in = tc.mangle(in)
			}
			workerKey := newTestChain("worker-secret", "").Key
			s := newChunkSigner(bytes.NewReader(in), &authRequest{
				date: "20260102", region: "us-east-1", service: "s3",
				amzDateRaw: "20260102T030405Z", signature: "seedworker",
			}, workerKey, tc.trailer, 1<<20)
			gw := newTestChain("gateway-secret", "seedgateway")
			s.setOutput(gw.Key, gw.AmzDate, gw.Scope, "seedgateway")
			out, err := io.ReadAll(s)

			if tc.wantErr != "" {
				if !errors.Is(err, errChunk) || s.err == nil || s.err.Code != tc.wantErr {
					t.Fatalf("err %v (%+v); want %s", err, s.err, tc.wantErr)
				}
				if len(out) >= lastData {
					t.Fatalf("passed on %d bytes of a bad body, up to its last data byte at %d", len(out), lastData)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(in) {
				t.Fatalf("re-signed body is %d bytes; the worker's was %d (Content-Length must hold)", len(out), len(in))
			}
			data, gotTrailer := decodeChunked(t, gw, out, tc.trailer)
			if !bytes.Equal(data, payload) {
				t.Fatalf("decoded %d bytes; want the %d sent", len(data), len(payload))
			}
			if gotTrailer != tr {
				t.Fatalf("trailer %q; want %q verbatim", gotTrailer, tr)
			}
		})
	}
}
