package gcs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// maxMetadataDoc bounds the JSON object resource the gateway reads to
// stamp it (a request's metadata; the store's own limit is far lower).
const maxMetadataDoc = 1 << 20

// stamp sets the token as the object's custom metadata StampKey in the
// request that writes it: the metadata part of a multipart upload, the
// object resource of a resumable upload's start (the session's object
// gets it), a compose's destination, a metadata update, and a copy or
// rewrite that gives the destination's metadata (one without takes the
// source's, stamp included, as the store copies it). Set, not merged: a
// worker's own value would forge the stamp `fence rebuild` trusts.
func (u *Upstream) stamp(r *http.Request, f *forward, req *gateway.Request) error {
	var whole []byte // the body, if the gateway has it in memory
	if req != nil {
		whole = req.Body
	}
	val := strconv.FormatInt(f.token, 10)
	switch t := f.target; {
	case t.op == opUpload:
		ct := r.Header.Get("Content-Type")
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != "multipart/related" || params["boundary"] == "" {
			return fencegate.InvalidRequest("a multipart upload's Content-Type must be multipart/related with a boundary")
		}
		var src io.Reader = r.Body
		if whole != nil {
			src = bytes.NewReader(whole)
		}
		br := multipartReaders.Get().(*bufio.Reader)
		br.Reset(src)
		body, delta, ahead, err := stampMultipart(br, params["boundary"], u.stampKey, val)
		if err != nil {
			recycle(br)
			return fencegate.InvalidRequest("the multipart upload's metadata part cannot be read: %v", err)
		}
		f.body = body
		if r.ContentLength >= 0 {
			f.bodyLen = r.ContentLength + delta
		} else if f.body, f.bodyLen = readAhead(body, ahead); f.bodyLen >= 0 {
			recycle(br) // read to its end: body holds none of it
		}
	case t.op == opResumable, t.op == opCompose, t.op == opCopy, t.op == opObject && !t.acl && (r.Method == http.MethodPatch || r.Method == http.MethodPut):
		doc := whole
		if doc == nil && r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxMetadataDoc+1))
			if err != nil {
				return fencegate.InvalidRequest("the request body ended early")
			}
			if len(b) > maxMetadataDoc {
				return fencegate.BodyTooLarge(maxMetadataDoc)
			}
			doc = b
		}
		if len(bytes.TrimSpace(doc)) == 0 && t.op == opCopy {
			// No metadata given: the copy takes the source's.
			if doc != nil {
				f.body, f.bodyLen = bytes.NewReader(doc), int64(len(doc))
			}
			return nil
		}
		at := ""
		if t.op == opCompose {
			at = "destination"
		}
		out, err := stampJSON(doc, at, u.stampKey, val)
		if err != nil {
			return fencegate.InvalidRequest("the request body is not a JSON object resource: %v", err)
		}
		f.body, f.bodyLen = bytes.NewReader(out), int64(len(out))
	}
	return nil
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
	k, err := json.Marshal(key)
	if err != nil {
		return nil, false
	}
	v, err := json.Marshal(val)
	if err != nil {
		return nil, false
	}
	rest := bytes.TrimSpace(d[1:])
	out := make([]byte, 0, len(d)+len(k)+len(v)+16)
	out = append(out, `{"metadata":{`...)
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, v...)
	out = append(out, '}')
	if rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), true
}

// multipartReaders are the buffers stampMultipart reads an upload's body
// through, recycled once a body was read whole (the small uploads, where a
// buffer per request was most of the gateway's allocated bytes).
var multipartReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func recycle(br *bufio.Reader) {
	br.Reset(nil)
	multipartReaders.Put(br)
}

// stampMultipart returns the multipart/related upload body br reads with
// its first part (the object resource) stamped, the change of its length,
// and the number of its bytes already read from br's source. Only the
// first part is read ahead; the media part streams through (from br).
func stampMultipart(br *bufio.Reader, boundary, key, val string) (io.Reader, int64, int, error) {
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
			stamped, jerr := stampJSON(old, "", key, val)
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
