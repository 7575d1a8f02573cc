package s3

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/adapters/relay"
)

// chunkSigner re-signs a signed aws-chunked body
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]) on the fly. Each chunk's
// signature chains from the request's seed signature; the gateway's seed
// differs from the worker's, so every chunk is verified with the worker's
// key and signed anew with the gateway's. A chunk's signature precedes its
// data, so one chunk (at most max bytes) is held in memory; signatures are
// always 64 hex digits, so the body keeps its length and Content-Length
// stays right.
//
// A chunk that fails verification ends the body with an error: the upstream
// then sees an incomplete request, which it does not apply. The last byte
// of each data chunk (and its CRLF) is held back until the next chunk, and
// after the last one the final chunk and its trailer, has been verified:
// an upstream that stores an object as soon as it has every decoded byte
// (VersityGW does, without waiting for the final chunk) must never get all
// of them from a body whose final chunk or trailer signature is bad.
type chunkSigner struct {
	src     *bufio.Reader
	in      sigChain
	out     sigChain
	trailer bool
	max     int

	pending bytes.Buffer
	held    []byte // the previous data chunk's last byte and CRLF
	done    bool
	err     *s3Error
}

// sigChain is one side's chained chunk signatures.
type sigChain struct {
	key     []byte
	amzDate string
	scope   string
	prev    string
}

func (c *sigChain) sign(kind, hash string) string {
	sts := kind + "\n" + c.amzDate + "\n" + c.scope + "\n" + c.prev + "\n" + hash
	c.prev = hex.EncodeToString(hmacSHA256(c.key, []byte(sts)))
	return c.prev
}

func (c *sigChain) chunk(data []byte) string {
	return c.sign("AWS4-HMAC-SHA256-PAYLOAD", emptySHA256+"\n"+sha256Hex(data))
}

func (c *sigChain) trailerSig(canonical []byte) string {
	return c.sign("AWS4-HMAC-SHA256-TRAILER", sha256Hex(canonical))
}

func newChunkSigner(body io.Reader, a *authRequest, key []byte, trailer bool, max int) *chunkSigner {
	return &chunkSigner{
		src:     bufio.NewReaderSize(body, relay.BufferSize),
		in:      sigChain{key: key, amzDate: a.amzDateRaw, scope: a.scope(), prev: a.signature},
		trailer: trailer,
		max:     max,
	}
}

// setOutput is called by the signing transport once the upstream request's
// seed signature is known, before the body is read.
func (s *chunkSigner) setOutput(key []byte, amzDate, scope, seed string) {
	s.out = sigChain{key: key, amzDate: amzDate, scope: scope, prev: seed}
}

var errChunk = errors.New("aws-chunked body refused")

func (s *chunkSigner) Read(p []byte) (int, error) {
	for s.pending.Len() == 0 {
		if s.err != nil {
			return 0, errChunk
		}
		if s.done {
			return 0, io.EOF
		}
		if err := s.next(); err != nil {
			if s.err == nil {
				s.err = errInvalidRequest("malformed aws-chunked body: " + err.Error())
			}
			return 0, errChunk
		}
	}
	return s.pending.Read(p)
}

func (s *chunkSigner) Close() error { return nil }

// next reads, verifies and re-signs one chunk into pending.
func (s *chunkSigner) next() error {
	line, err := s.line()
	if err != nil {
		return err
	}
	sizeHex, ext, ok := strings.Cut(line, ";")
	sig, ok2 := strings.CutPrefix(ext, "chunk-signature=")
	if !ok || !ok2 || len(sig) != 64 {
		return errors.New("chunk header without chunk-signature")
	}
	size, err := strconv.ParseInt(sizeHex, 16, 64)
	if err != nil || size < 0 {
		return errors.New("bad chunk size")
	}
	if size > int64(s.max) {
		s.err = errInvalidRequest("aws-chunked chunk of " + strconv.FormatInt(size, 10) + " bytes exceeds the gateway's limit of " + strconv.Itoa(s.max))
		return s.err
	}
	if size == 0 {
		return s.final(sizeHex, sig)
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(s.src, data); err != nil {
		return err
	}
	if data[size] != '\r' || data[size+1] != '\n' {
		return errors.New("chunk not terminated by CRLF")
	}
	data = data[:size]
	if !hmac.Equal([]byte(s.in.chunk(data)), []byte(sig)) {
		s.err = errSignatureMismatch()
		return s.err
	}
	s.release()
	s.pending.WriteString(sizeHex + ";chunk-signature=" + s.out.chunk(data) + "\r\n")
	s.pending.Write(data[:size-1])
	s.held = append(s.held[:0], data[size-1], '\r', '\n')
	return nil
}

// release passes on the held-back end of the previous data chunk, once the
// chunk after it has been verified.
func (s *chunkSigner) release() {
	s.pending.Write(s.held)
	s.held = s.held[:0]
}

// final handles the zero-size chunk and, for -TRAILER bodies, the trailing
// headers (checksums) with their own chained signature.
func (s *chunkSigner) final(sizeHex, sig string) error {
	if !hmac.Equal([]byte(s.in.chunk(nil)), []byte(sig)) {
		s.err = errSignatureMismatch()
		return s.err
	}
	// Nothing of the final chunk is passed on (nor the held-back end of the
	// last data chunk) before its trailer is verified too.
	out := sizeHex + ";chunk-signature=" + s.out.chunk(nil) + "\r\n"
	var canonical, raw bytes.Buffer
	trailerSig := ""
	for {
		l, err := s.line()
		if err != nil {
			return err
		}
		if l == "" {
			break
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return errors.New("malformed trailer")
		}
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "x-amz-trailer-signature" {
			trailerSig = strings.TrimSpace(value)
			continue
		}
		if !s.trailer || canonical.Len() > 4<<10 {
			return errors.New("unexpected trailer")
		}
		canonical.WriteString(name + ":" + strings.TrimSpace(value) + "\n")
		raw.WriteString(l + "\r\n")
	}
	if s.trailer {
		if !hmac.Equal([]byte(s.in.trailerSig(canonical.Bytes())), []byte(trailerSig)) {
			s.err = errSignatureMismatch()
			return s.err
		}
		out += raw.String() // verbatim: the body keeps its length
		out += "x-amz-trailer-signature:" + s.out.trailerSig(canonical.Bytes()) + "\r\n"
	} else if trailerSig != "" {
		return errors.New("unexpected trailer")
	}
	s.release()
	s.pending.WriteString(out + "\r\n")
	s.done = true
	return nil
}

func (s *chunkSigner) line() (string, error) {
	l, err := s.src.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("chunk header too long")
		}
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(l), "\n"), "\r"), nil
}
