package gcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"unicode"
)

// names are the objects a request body names: an object resource's
// bucket and name (or an access control's object), and a compose's
// destination and sources (sourceObjects, one names each, in the order
// sent; nil if the member is absent or null).
type names struct {
	bucket, name, object *string
	dest                 *names
	sources              []*names
}

// sensitive are the members the gateway reads from a body, or stamps. A
// member spelled otherwise but equal when folded (case, Unicode folding
// as encoding/json applies it, "_") is refused: fake-gcs-server decodes
// members case-insensitively, the store reads proto field names too.
var sensitive = map[string]string{
	"bucket": "bucket", "name": "name", "object": "object",
	"metadata": "metadata", "destination": "destination", "sourceobjects": "sourceObjects",
}

// fold is the form two member names share if some reader takes them for
// one member: Unicode simple folding (so "ſ" is "s" and "K" is "k", as
// encoding/json matches them), without "_" and "-".
func fold(k string) string {
	var b strings.Builder
	for _, r := range k {
		if r == '_' || r == '-' {
			continue
		}
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return strings.ToLower(b.String())
}

// readNames reads a JSON document as the store and its emulator may: it
// must be one object (or nothing), whose members are distinct however
// they are folded, at every level, with the members the gateway reads
// spelled as the API spells them. It returns the objects the document
// names.
func readNames(doc []byte) (*names, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return &names{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	n, err := readObject(dec, 0, true)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return n, nil
}

// maxDepth bounds the nesting of a document the gateway reads.
const maxDepth = 32

// readObject reads the members of an object whose "{" was read; capture:
// it is a resource whose names the gateway reads.
func readObject(dec *json.Decoder, depth int, capture bool) (*names, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deep")
	}
	n := &names{}
	seen := map[string]string{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if tok == json.Delim('}') {
			return n, nil
		}
		k := tok.(string) // an object's member name
		f := fold(k)
		if prev, dup := seen[f]; dup {
			return nil, fmt.Errorf("member %q and %q are one member for some readers", prev, k)
		}
		seen[f] = k
		if want, ok := sensitive[f]; ok && k != want {
			return nil, fmt.Errorf("member %q must be spelled %q", k, want)
		}
		var into **string
		switch {
		case capture && k == "bucket":
			into = &n.bucket
		case capture && k == "name":
			into = &n.name
		case capture && k == "object":
			into = &n.object
		case capture && depth == 0 && k == "destination":
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			if tok == json.Delim('{') {
				if n.dest, err = readObject(dec, depth+1, true); err != nil {
					return nil, err
				}
				continue
			}
			if tok != nil {
				return nil, errors.New("destination is not an object")
			}
			continue
		case capture && depth == 0 && k == "sourceObjects":
			if n.sources, err = readSources(dec, depth+1); err != nil {
				return nil, err
			}
			continue
		}
		if into != nil {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			s, ok := tok.(string)
			if !ok {
				return nil, fmt.Errorf("member %q is not a string", k)
			}
			*into = &s
			continue
		}
		if err := skipValue(dec, depth+1); err != nil {
			return nil, err
		}
	}
}

// readSources reads a compose's sourceObjects: null, or an array of
// objects whose names the gateway reads (each source's name, and a bucket
// or object member if one is sent, which must agree with it).
func readSources(dec *json.Decoder, depth int) ([]*names, error) {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return nil, err
	}
	if tok != json.Delim('[') || depth > maxDepth {
		return nil, errors.New("sourceObjects is not an array")
	}
	var srcs []*names
	for dec.More() {
		if tok, err = dec.Token(); err != nil {
			return nil, err
		}
		if tok != json.Delim('{') {
			return nil, fmt.Errorf("sourceObjects[%d] is not an object", len(srcs))
		}
		s, err := readObject(dec, depth+1, true)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, s)
	}
	_, err = dec.Token() // "]"
	return srcs, err
}

// skipValue reads one value, checking the members of its objects.
func skipValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		_, err := readObject(dec, depth, false)
		return err
	case json.Delim('['):
		if depth > maxDepth {
			return errors.New("nested too deep")
		}
		for dec.More() {
			if err := skipValue(dec, depth+1); err != nil {
				return err
			}
		}
		_, err := dec.Token() // "]"
		return err
	}
	return nil
}

// agree reports whether the document names only the bucket and object
// given (members it does not have agree).
func (n *names) agree(bucket, object string) bool {
	eq := func(p *string, want string) bool { return p == nil || *p == want }
	return eq(n.bucket, bucket) && eq(n.name, object) && eq(n.object, object) &&
		(n.dest == nil || n.dest.agree(bucket, object))
}

// jsonType reports whether a Content-Type is exactly JSON's (with at most
// charset=utf-8): fake-gcs-server reads a resumable upload's body as the
// object's resource when its Content-Type merely contains
// "application/json".
func jsonType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" || !strings.HasPrefix(ct, "application/json") {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}
