package gcs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/fencegate/fencegate"
)

// maxMetadataDoc bounds the JSON object resource the gateway reads to
// stamp it (a request's metadata; the store's own limit is far lower).
const maxMetadataDoc = 1 << 20

// body reads what the gateway must read of a write's body before it is
// forwarded, and stamps it. A body that names objects (a resumable
// upload's resource, a multipart upload's metadata part, a compose's
// destination, a copy's or a metadata update's resource, an ACL entry)
// must name the objects the request is fenced on, and be read one way:
// one JSON object, members distinct however they are folded, the members
// the gateway reads spelled as the API spells them, a Content-Type that is
// JSON's exactly (bodyDoc). Otherwise the request is refused before
// anything is forwarded.
//
// With stamping, the token is set as the object's custom metadata
// StampKey: in the metadata part of a multipart upload, the object
// resource of a resumable upload's start (the session's object gets it), a
// compose's destination, a metadata update, and a copy or rewrite (given
// the source's metadata where its body names none: copyDoc). Set, not
// merged: a worker's own value would forge the stamp `fence rebuild`
// trusts.
func (u *Upstream) body(r *http.Request, f *forward) error {
	whole := f.Body // the body, if the gateway has it in memory
	stamp := f.Token > 0 && u.stampKey != ""
	val := strconv.FormatInt(f.Token, 10)
	t := f.State.target
	switch {
	case t.op == opUpload && t.multipart:
		boundary := t.boundary // checked by Inspect (checkBodyHeaders)
		edit := func(doc []byte) ([]byte, error) {
			if err := checkNames(doc, t.bucket, t.object, true); err != nil {
				return nil, err
			}
			if !stamp {
				return doc, nil
			}
			return stampJSON(doc, "", u.stampKey, val)
		}
		data, src, release := readSmall(r, whole)
		if data != nil {
			out, err := spliceMultipart(data, boundary, edit)
			release()
			if err != nil {
				return fencegate.InvalidRequest("the multipart upload's metadata part: %v", err)
			}
			f.State.body, f.State.bodyLen = bytes.NewReader(out), int64(len(out))
			switch {
			case r.ContentLength >= 0:
				f.State.bodyLen = r.ContentLength + int64(len(out)-len(data))
			case len(out) > smallUpload:
				f.State.bodyLen = -1 // as readAhead sends a longer body
			}
			return nil
		}
		br := multipartReaders.Get().(*bufio.Reader)
		br.Reset(src)
		body, delta, ahead, err := editMultipart(br, boundary, edit)
		if err != nil {
			recycle(br)
			return fencegate.InvalidRequest("the multipart upload's metadata part: %v", err)
		}
		f.State.body = body
		if r.ContentLength >= 0 {
			f.State.bodyLen = r.ContentLength + delta
		} else if f.State.body, f.State.bodyLen = readAhead(body, ahead); f.State.bodyLen >= 0 {
			recycle(br) // read to its end: body holds none of it
		}
	case t.op == opResumable, t.op == opCompose, t.op == opCopy, t.op == opMove, t.op == opBucket,
		t.op == opObject && r.Method != http.MethodDelete:
		doc, err := bodyDoc(r, whole)
		if err != nil {
			return err
		}
		bucket, object := t.bucket, t.object
		switch t.op {
		case opMove:
			bucket, object = t.bucket2, t.object2
		case opBucket:
			object = t.bucket // a bucket resource's name is the bucket's
		}
		// An object's metadata or ACL update is applied to the object its
		// path names; its body may name the bucket alone, as the official
		// clients send it. An upload's resource names the object written.
		if err := checkNames(doc, bucket, object, t.op != opObject); err != nil {
			return fencegate.InvalidRequest("the request body: %v", err)
		}
		stamped := stamp && (t.op == opResumable || t.op == opCompose || t.op == opCopy ||
			t.op == opObject && !t.acl)
		if stamped && t.op == opCopy {
			// The source's metadata, which the store would copy with its
			// stamp, is sent as the destination's (copyDoc).
			if doc, err = u.copyDoc(r, f, doc); err != nil {
				return err
			}
		}
		if stamped {
			at := ""
			if t.op == opCompose {
				at = "destination"
			}
			if doc, err = stampJSON(doc, at, u.stampKey, val); err != nil {
				return fencegate.InvalidRequest("the request body is not a JSON object resource: %v", err)
			}
		}
		if doc != nil {
			f.State.body, f.State.bodyLen = bytes.NewReader(doc), int64(len(doc))
		}
	}
	return nil
}

// multipartBoundary is the boundary of a multipart upload's Content-Type,
// which must be multipart/related with one. A single-quoted boundary is
// read one way by fake-gcs-server (gsutil's quoting) and another by a MIME
// parser.
func multipartBoundary(ct string) (string, *fencegate.Error) {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/related" || params["boundary"] == "" || strings.ContainsRune(ct, '\'') {
		return "", fencegate.InvalidRequest("a multipart upload's Content-Type must be multipart/related with a boundary (unquoted or double-quoted)")
	}
	return params["boundary"], nil
}

// bodyDoc reads a JSON request body (bounded): nil if there is none. A
// body of another Content-Type than JSON's is refused: the store or its
// emulator may read it as JSON all the same, or not.
func bodyDoc(r *http.Request, whole []byte) ([]byte, error) {
	doc := whole
	if doc == nil && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxMetadataDoc+1))
		if err != nil {
			return nil, fencegate.InvalidRequest("the request body ended early")
		}
		if len(b) > maxMetadataDoc {
			return nil, fencegate.BodyTooLarge(maxMetadataDoc)
		}
		doc = b
	}
	if len(doc) > 0 && !jsonType(r.Header.Get("Content-Type")) {
		return nil, fencegate.InvalidRequest("the request body must be sent with Content-Type application/json (at most charset=UTF-8)")
	}
	return doc, nil
}

// checkNames reads doc (readNames) and refuses it unless every object it
// names is bucket/object; with nameRequired, a doc that names the bucket
// must name the object too.
func checkNames(doc []byte, bucket, object string, nameRequired bool) error {
	_, err := checkedNames(doc, bucket, object, nameRequired)
	return err
}

// checkedNames is checkNames, with the names it read.
func checkedNames(doc []byte, bucket, object string, nameRequired bool) (*names, error) {
	n, err := readNames(doc)
	if err != nil {
		return n, fmt.Errorf("not one JSON object read one way: %w", err)
	}
	if !n.agree(bucket, object) {
		return n, fmt.Errorf("it names another bucket or object than the request's %s/%s (the store may write the one it names)", bucket, object)
	}
	if nameRequired && n.bucket != nil && n.name == nil && n.object == nil {
		// fake-gcs-server takes a resumable upload's resource that names
		// a bucket for the whole name: the object's name is then the
		// resource's, "" if it has none.
		return n, fmt.Errorf("it names the bucket but not the object: name it too (%q)", object)
	}
	return n, nil
}

// stampJSON sets metadata[key] = val in the object resource doc (at: the
// member holding it, "" for doc itself). An empty doc is an empty object.
func stampJSON(doc []byte, at, key, val string) ([]byte, error) {
	if at == "" {
		if out, ok := stampPlain(doc, key, val); ok {
			return out, nil
		}
	}
	top := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(doc)) > 0 {
		if err := json.Unmarshal(doc, &top); err != nil {
			return nil, err
		}
	}
	obj := top
	if at != "" {
		obj = map[string]json.RawMessage{}
		if raw, ok := top[at]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &obj); err != nil {
				return nil, err
			}
		}
	}
	meta := map[string]any{}
	if raw, ok := obj["metadata"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
	}
	meta[key] = val
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	obj["metadata"] = m
	if at != "" {
		if top[at], err = json.Marshal(obj); err != nil {
			return nil, err
		}
	}
	return json.Marshal(top)
}

// stampPlain is stampJSON for the common document: a JSON object with no
// metadata member (an upload's object resource when the worker sets no
// custom metadata), which gets the member first, the rest of its bytes
// unchanged. It declines (false) anything else, and any document with an
// escape sequence, which could spell the member's name otherwise: decoding
// and re-encoding every upload's resource cost more of the gateway's CPU
// than forwarding it.
func stampPlain(doc []byte, key, val string) ([]byte, bool) {
	d := bytes.TrimSpace(doc)
	if len(d) < 2 || d[0] != '{' || bytes.Contains(d, []byte("metadata")) || bytes.IndexByte(d, '\\') >= 0 || !json.Valid(d) {
		return nil, false
	}
	rest := bytes.TrimSpace(d[1:])
	out := make([]byte, 0, len(d)+len(key)+len(val)+20)
	out = append(out, `{"metadata":{`...)
	out, ok := appendJSONString(out, key)
	if !ok {
		return nil, false
	}
	out = append(out, ':')
	if out, ok = appendJSONString(out, val); !ok {
		return nil, false
	}
	out = append(out, '}')
	if rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), true
}

// appendJSONString appends s as json.Marshal encodes it. A string of
// printable ASCII that JSON (with json.Marshal's HTML escaping) leaves as
// it is, as a stamp's key and token are, is quoted in place, without
// Marshal's allocations on every stamped upload (with the splice's own
// delimiter, 136 to 129 allocations per 4 KiB upload in process:
// BenchmarkGatewayUpload).
func appendJSONString(dst []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, err := json.Marshal(s)
			if err != nil {
				return dst, false
			}
			return append(dst, b...), true
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), true
}

// multipartReaders are the buffers stampMultipart reads an upload's body
// through, recycled once a body was read whole (the small uploads, where a
// buffer per request was most of the gateway's allocated bytes).
var multipartReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func recycle(br *bufio.Reader) {
	br.Reset(nil)
	multipartReaders.Put(br)
}

// editMultipart returns the multipart/related upload body br reads with
// its first part (the object resource) replaced by edit's result, the
// change of its length, and the number of its bytes already read from br's
// source. Only the first part is read ahead; the media part streams
// through (from br). The first part must be the one a MIME reader (the
// emulator's) finds, with the same bytes: otherwise the gateway and the
// store would read different metadata.
func editMultipart(br *bufio.Reader, boundary string, edit func([]byte) ([]byte, error)) (io.Reader, int64, int, error) {
	delim := []byte("--" + boundary)
	// Read until the end of the first part: its head, a blank line, the
	// JSON and the next delimiter.
	var head bytes.Buffer
	for {
		line, err := br.ReadSlice('\n')
		head.Write(line)
		if err != nil {
			return nil, 0, 0, errors.New("no metadata part")
		}
		if head.Len() > maxMetadataDoc {
			return nil, 0, 0, errors.New("metadata part too large")
		}
		if bytes.HasSuffix(head.Bytes(), []byte("\r\n\r\n")) && bytes.Contains(head.Bytes(), delim) {
			break
		}
	}
	var doc bytes.Buffer
	next := append([]byte("\r\n"), delim...)
	for {
		b, err := br.ReadSlice('\n')
		doc.Write(b)
		if i := bytes.Index(doc.Bytes(), next); i >= 0 {
			rest := append([]byte(nil), doc.Bytes()[i:]...)
			old := doc.Bytes()[:i]
			stamped, jerr := editFirstPart(head.Bytes(), old, rest, boundary, edit)
			if jerr != nil {
				return nil, 0, 0, jerr
			}
			delta := int64(len(stamped) - len(old))
			ahead := head.Len() + len(stamped) + len(rest) + br.Buffered()
			return io.MultiReader(bytes.NewReader(head.Bytes()), bytes.NewReader(stamped), bytes.NewReader(rest), br), delta, ahead, nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, 0, 0, errors.New("the metadata part does not end")
		}
		if doc.Len() > maxMetadataDoc {
			return nil, 0, 0, errors.New("metadata part too large")
		}
	}
}

// editFirstPart is edit's result on doc, the first part of the body
// head+doc+rest, if a MIME reader reads it so.
func editFirstPart(head, doc, rest []byte, boundary string, edit func([]byte) ([]byte, error)) ([]byte, error) {
	if !sameFirstPart(head, doc, rest, boundary) {
		return nil, errors.New("its first part reads differently for a MIME reader")
	}
	return edit(doc)
}

// smallBodies are the buffers readSmall reads a body into.
var smallBodies = sync.Pool{New: func() any { b := make([]byte, smallUpload+1); return &b }}

// readSmall reads a multipart upload's body whole if it is small (at most
// smallUpload bytes, its length known or not): data, valid until release
// is called. Otherwise data is nil and src reads the body from its start
// for the streaming splice: the bytes read so far, then the rest of the
// worker's body or the read error that stopped the reading, which the
// splice or the forward then meets where it would have met it streaming.
// whole is the body if the gateway read it already. A small body is read
// to its end before its first part is checked: a refusal waits for at
// most smallUpload bytes more than it did.
func readSmall(r *http.Request, whole []byte) (data []byte, src io.Reader, release func()) {
	switch {
	case whole != nil && len(whole) <= smallUpload:
		return whole, nil, func() {}
	case whole != nil:
		return nil, bytes.NewReader(whole), nil
	case r.Body == nil || r.Body == http.NoBody:
		return []byte{}, nil, func() {}
	case r.ContentLength > smallUpload:
		return nil, r.Body, nil
	}
	bp := smallBodies.Get().(*[]byte)
	buf := *bp
	n, err := 0, error(nil)
	for n < len(buf) && err == nil {
		var m int
		m, err = r.Body.Read(buf[n:])
		n += m
	}
	switch {
	case err == io.EOF:
		return buf[:n], nil, func() { smallBodies.Put(bp) }
	case err == nil:
		// Longer than smallUpload: the buffer goes with the stream.
		return nil, io.MultiReader(bytes.NewReader(buf[:n]), r.Body), nil
	}
	return nil, io.MultiReader(bytes.NewReader(buf[:n]), errReader{err}), nil
}

// spliceMultipart is editMultipart on a body read whole: the body with its
// first part replaced by edit's result, in one buffer. It reads data as
// editMultipart reads a stream, line by line: the head ends with the first
// blank line after a delimiter, the first part with the next delimiter
// (its line handed to the MIME reader's check as editMultipart has it).
func spliceMultipart(data []byte, boundary string, edit func([]byte) ([]byte, error)) ([]byte, error) {
	next := []byte("\r\n--" + boundary) // the first part's end
	delim := next[2:]
	end := 0
	for {
		i := bytes.Index(data[end:], []byte("\r\n\r\n"))
		if i < 0 {
			return nil, errors.New("no metadata part")
		}
		if bytes.Contains(data[:end+i+4], delim) {
			end += i + 4
			break
		}
		end += i + 1
	}
	head := data[:end]
	i := bytes.Index(data[end:], next)
	if i < 0 {
		return nil, errors.New("the metadata part does not end")
	}
	doc, rest := data[end:end+i], data[end+i:]
	line := len(rest)
	if j := bytes.IndexByte(rest[len(delim)+1:], '\n'); j >= 0 {
		line = len(delim) + 1 + j + 1
	}
	stamped, err := editFirstPart(head, doc, rest[:line], boundary, edit)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+len(stamped)+len(rest))
	out = append(out, head...)
	out = append(out, stamped...)
	return append(out, rest...), nil
}

// sameFirstPart reports whether a MIME multipart reader (Go's, which
// fake-gcs-server uses) reads doc as the first part of head+doc+rest.
func sameFirstPart(head, doc, rest []byte, boundary string) bool {
	mr := multipart.NewReader(io.MultiReader(bytes.NewReader(head), bytes.NewReader(doc), bytes.NewReader(rest)), boundary)
	p, err := mr.NextPart()
	if err != nil {
		return false
	}
	got, err := io.ReadAll(io.LimitReader(p, maxMetadataDoc+1))
	return err == nil && bytes.Equal(got, doc)
}

// smallUpload is the largest stamped upload of unknown length that the
// gateway holds whole before it forwards it.
const smallUpload = 64 << 10

// readAhead reads up to smallUpload bytes of body: a body that ends within
// them is sent with its length (one write upstream, as a client sends a
// small body), not streamed in chunks by a goroutine of its own, as a body
// of unknown length is. The Go client sends every multipart upload with
// unknown length. A longer body streams on from where the read stopped; a
// read error is handed on to the forwarded request, which fails with it as
// it would have streaming. hint is the number of bytes body has without
// reading from the worker: the buffer is sized for them.
func readAhead(body io.Reader, hint int) (io.Reader, int64) {
	var b bytes.Buffer
	b.Grow(min(hint, smallUpload) + bytes.MinRead)
	_, err := b.ReadFrom(io.LimitReader(body, smallUpload+1))
	buf := b.Bytes()
	switch {
	case err != nil:
		return io.MultiReader(bytes.NewReader(buf), errReader{err}), -1
	case len(buf) <= smallUpload:
		return bytes.NewReader(buf), int64(len(buf))
	}
	return io.MultiReader(bytes.NewReader(buf), body), -1
}

// errReader is a body whose reading failed.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
