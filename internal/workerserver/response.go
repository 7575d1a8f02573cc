package workerserver

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the fast path's http.ResponseWriter. It frames answers as
// net/http's server does: a declared Content-Length is kept; an answer the
// handler ends within its first 2 KiB gets one; any other is chunked, with
// the trailers it declares; a request body left unread is read (up to 256
// KiB) before the answer starts, or the connection closes after it; the
// Date and a sniffed Content-Type are added when absent.
type response struct {
	c      *conn
	req    *http.Request
	body   *body
	header http.Header
	// snap is the header as it was at WriteHeader when the head is not
	// yet written (net/http answers with that state, not later changes).
	snap http.Header

	status      int
	wroteHeader bool // the final status is set
	headSent    bool // the head is in c.bw
	chunked     bool
	noBody      bool  // the status allows no body
	clen        int64 // the declared Content-Length, -1 if none
	written     int64 // body bytes the handler wrote
	npend       int   // bytes in c.pend, before the head is sent
	closeAfter  bool
	done        bool // the handler returned
	trailers    []string
}

var (
	errWriteAfterDone = errors.New("workerserver: write after the handler returned")
	crlf              = []byte("\r\n")
	// Headers not written on answers without a body (net/http's lists).
	excludedNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}
)

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	if w.wroteHeader || w.done {
		w.c.srv.logf("http: superfluous response.WriteHeader call (status %d)", code)
		return
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational: sent at once; the header map stays as it is
		// (RFC 8297), the handler clears it if it wants.
		if w.c.werr == nil {
			writeStatusLine(w.c.bw, code)
			w.header.WriteSubset(w.c.bw, excludedNoBody)
			w.c.bw.Write(crlf)
			w.c.bw.Flush()
		}
		return
	}
	w.wroteHeader = true
	w.status = code
	w.noBody = !bodyAllowedForStatus(code)
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.clen = v
		} else {
			w.c.srv.logf("http: invalid Content-Length of %q", cl)
			w.header.Del("Content-Length")
		}
	}
	if (w.clen >= 0 || w.noBody) && !w.sniffs() {
		w.writeHead(nil) // its framing is known: no snapshot needed
	} else {
		w.snap = w.header.Clone()
	}
}

// sniffs reports whether the answer's Content-Type is sniffed from its
// first bytes (none set, no Content-Encoding: net/http's rule).
func (w *response) sniffs() bool {
	h := w.header
	if w.snap != nil {
		h = w.snap
	}
	_, haveType := h["Content-Type"]
	return !w.noBody && !haveType && h.Get("Content-Encoding") == "" && h.Get("Transfer-Encoding") == ""
}

func (w *response) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriteAfterDone
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	if !w.headSent {
		if w.clen < 0 && w.npend+len(p) <= len(w.c.pend) {
			w.npend += copy(w.c.pend[w.npend:], p)
			w.written += int64(len(p))
			return len(p), nil
		}
		w.writeHead(p)
	}
	w.written += int64(len(p))
	if w.chunked {
		w.writeChunk(p)
	} else {
		w.c.bw.Write(p)
	}
	if w.c.werr != nil {
		return 0, w.c.werr
	}
	return len(p), nil
}

func (w *response) writeChunk(p []byte) {
	if len(p) == 0 {
		return
	}
	bw := w.c.bw
	var hex [16]byte
	bw.Write(strconv.AppendInt(hex[:0], int64(len(p)), 16))
	bw.Write(crlf)
	bw.Write(p)
	bw.Write(crlf)
}

// Flush sends what is written so far (http.Flusher); an answer of unknown
// length is chunked from here on.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush with its error (http.ResponseController).
func (w *response) FlushError() error {
	if w.done {
		return errWriteAfterDone
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.writeHead(nil)
	}
	w.c.bw.Flush()
	return w.c.werr
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// writeHead writes the status line and header to c.bw, then any pending
// body bytes; next are the body's first bytes if none are pending (for
// sniffing). The framing is decided here, as in net/http's
// chunkWriter.writeHeader.
func (w *response) writeHead(next []byte) {
	w.headSent = true
	h := w.header
	if w.snap != nil {
		h = w.snap
	}
	var exclude map[string]bool
	del := func(k string) {
		if _, ok := h[k]; !ok {
			return
		}
		if exclude == nil {
			exclude = make(map[string]bool)
		}
		exclude[k] = true
	}
	trailers := false
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			del(k)
			trailers = true
		}
	}
	for _, v := range h["Trailer"] {
		trailers = true
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
				switch k {
				case "Transfer-Encoding", "Trailer", "Content-Length":
					// not allowed as trailers
				default:
					w.trailers = append(w.trailers, k)
				}
			}
		}
	}
	te := h.Get("Transfer-Encoding")
	// The handler ended within the first bytes: their length is known.
	if w.done && !trailers && te == "" && !w.noBody && w.clen < 0 {
		w.clen = int64(w.npend)
	}
	// A request body left unread: read and drop it (net/http's rule), or
	// close after the answer.
	if !w.closeAfter && w.req.ContentLength != 0 && !w.body.discard() {
		w.closeAfter = true
	}
	if httpguts.HeaderValuesContainsToken(h["Connection"], "close") || w.c.srv.shutdown.Load() {
		w.closeAfter = true
	}
	var contentType string
	if w.noBody {
		for _, k := range suppressedHeaders(w.status) {
			del(k)
		}
	} else if first := w.c.pend[:w.npend]; w.sniffs() && (len(first) > 0 || len(next) > 0) {
		if len(first) == 0 {
			first = next
		}
		contentType = http.DetectContentType(first)
	}
	switch {
	case w.noBody:
		del("Transfer-Encoding")
	case w.clen >= 0:
		del("Transfer-Encoding")
	case te == "identity":
		w.closeAfter = true // the end of the connection ends the answer
		del("Transfer-Encoding")
	default:
		w.chunked = true
		del("Transfer-Encoding")
		del("Content-Length")
	}
	if w.closeAfter {
		del("Connection")
	}

	bw := w.c.bw
	writeStatusLine(bw, w.status)
	h.WriteSubset(bw, exclude)
	if contentType != "" {
		bw.WriteString("Content-Type: " + contentType + "\r\n")
	}
	if _, ok := h["Date"]; !ok {
		bw.Write(dateHeader())
	}
	if w.clen >= 0 && !w.noBody && h.Get("Content-Length") == "" {
		var b [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(b[:0], w.clen, 10))
		bw.Write(crlf)
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter {
		bw.WriteString("Connection: close\r\n")
	}
	bw.Write(crlf)
	if w.npend > 0 {
		if w.chunked {
			w.writeChunk(w.c.pend[:w.npend])
		} else {
			bw.Write(w.c.pend[:w.npend])
		}
		w.npend = 0
	}
}

// finish completes the answer after the handler returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	if !w.headSent {
		w.writeHead(nil)
	}
	if w.chunked {
		bw := w.c.bw
		bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			for _, v := range w.header[k] {
				writeField(bw, k, v)
			}
		}
		for k, vv := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					writeField(bw, name, v)
				}
			}
		}
		bw.Write(crlf)
	}
	if w.clen >= 0 && !w.noBody && w.written != w.clen {
		w.closeAfter = true // the answer is cut short: the client must see it end
	}
	if !w.closeAfter && !w.body.discard() {
		w.closeAfter = true
	}
	w.c.bw.Flush()
}

var lineBreaks = strings.NewReplacer("\r", " ", "\n", " ")

// writeField writes a trailer field, its value cleaned as Header.Write
// cleans values (no line breaks).
func writeField(bw interface{ WriteString(string) (int, error) }, k, v string) {
	if !httpguts.ValidHeaderFieldName(k) {
		return
	}
	v = strings.TrimSpace(lineBreaks.Replace(v))
	bw.WriteString(k + ": " + v + "\r\n")
}

func writeStatusLine(bw *bufio.Writer, code int) {
	var num [3]byte
	n := strconv.AppendInt(num[:0], int64(code), 10)
	bw.WriteString("HTTP/1.1 ")
	bw.Write(n)
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(n)
	}
	bw.Write(crlf)
}

func bodyAllowedForStatus(code int) bool {
	return !(code >= 100 && code <= 199 || code == http.StatusNoContent || code == http.StatusNotModified)
}

func suppressedHeaders(code int) []string {
	if code == http.StatusNotModified {
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	}
	return []string{"Content-Length", "Transfer-Encoding"}
}

// dateLine is the Date header line, formatted at most once a second.
type dateLine struct {
	sec  int64
	line []byte
}

var lastDate atomic.Pointer[dateLine]

func dateHeader() []byte {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return d.line
	}
	line := now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat)
	d := &dateLine{sec: now.Unix(), line: append(line, crlf...)}
	lastDate.Store(d)
	return d.line
}
