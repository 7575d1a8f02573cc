package objectstore

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// A stamped copy that would take the source's metadata (the source's stamp
// included, from which `fence rebuild` would rebuild the destination's
// fence below its real one) is sent by S3's and Azure's dialects with the
// source's metadata read by the gateway and the copy's stamp, on the
// condition that the source is still the version read: ReadSource, then
// SendSource.

// SourceConditions are the names of a dialect's headers for a copy's
// conditions on its source (x-amz-copy-source-if-*, x-ms-source-if-*).
type SourceConditions struct {
	IfMatch, IfNoneMatch, IfModifiedSince, IfUnmodifiedSince string
}

// Hold reports whether the conditions h carries hold for a source of etag,
// last modified at lastModified (an HTTP date), as the store would
// evaluate them (RFC 9110: If-Match overrides If-Unmodified-Since,
// If-None-Match If-Modified-Since).
func (c SourceConditions) Hold(h http.Header, etag, lastModified string) bool {
	mod, _ := http.ParseTime(lastModified)
	since := func(name string) (time.Time, bool) {
		t, err := http.ParseTime(h.Get(name))
		return t, err == nil
	}
	im, hasIM := h[c.IfMatch]
	inm, hasINM := h[c.IfNoneMatch]
	failed := hasIM && !ETagMatches(im, etag, true) || hasINM && ETagMatches(inm, etag, false)
	if t, ok := since(c.IfUnmodifiedSince); ok && !hasIM {
		failed = failed || mod.After(t)
	}
	if t, ok := since(c.IfModifiedSince); ok && !hasINM {
		failed = failed || !mod.After(t)
	}
	return !failed
}

// Set replaces the conditions h carries with the gateway's: the source
// must be the version of etag.
func (c SourceConditions) Set(h http.Header, etag string) {
	for _, n := range c.Names() {
		h.Del(n)
	}
	h.Set(c.IfMatch, etag)
}

// Names lists the headers.
func (c SourceConditions) Names() []string {
	return []string{c.IfMatch, c.IfNoneMatch, c.IfModifiedSince, c.IfUnmodifiedSince}
}

// CopySource is a copy's source as the gateway read it: its metadata
// headers and the other headers the copy takes from it, at ETag.
type CopySource struct {
	Header http.Header
	ETag   string
}

// SourceRefusals are a dialect's refusals of a copy source it read: it
// does not exist, the gateway may not read it, a worker's condition on it
// does not hold.
type SourceRefusals struct{ NotFound, Forbidden, Failed error }

// ReadSource reads the answer to the gateway's read of a copy's source
// (what names the read in errors) and evaluates the worker's conditions
// on the source (in) against it, as the store would. It keeps the
// metadata headers (prefix, as ReplaceMeta's) and those named in content.
func (c SourceConditions) ReadSource(resp *http.Response, in http.Header, what, prefix string, content []string, ref SourceRefusals) (*CopySource, error) {
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, ref.NotFound
	case resp.StatusCode == http.StatusForbidden:
		return nil, ref.Forbidden
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: %s", what, resp.Status)
	case resp.Header.Get("ETag") == "":
		return nil, fmt.Errorf("%s answered no ETag: the copy cannot be made conditional on it", what)
	case strings.HasPrefix(resp.Header.Get("ETag"), "W/"):
		// A weak validator names a version only up to what its server
		// deems equivalent, and the store's If-Match never matches it.
		return nil, fmt.Errorf("%s answered a weak ETag: the copy cannot be made conditional on it", what)
	}
	s := &CopySource{Header: http.Header{}, ETag: resp.Header.Get("ETag")}
	CopyMeta(s.Header, resp.Header, prefix)
	for _, k := range content {
		if v, ok := resp.Header[k]; ok {
			s.Header[k] = v
		}
	}
	if !c.Hold(in, s.ETag, resp.Header.Get("Last-Modified")) {
		return nil, ref.Failed
	}
	return s, nil
}

// SendSource sends the outbound copy (its headers h) with the source's
// metadata and content headers instead of its own, on the condition that
// the source is still the version read.
func (c SourceConditions) SendSource(h http.Header, s *CopySource, prefix string, content []string) {
	for _, k := range content {
		h.Del(k)
	}
	ReplaceMeta(h, s.Header, prefix)
	for _, k := range content {
		if v, ok := s.Header[k]; ok {
			h[k] = v
		}
	}
	c.Set(h, s.ETag)
}

// ETagMatches reports whether an entity-tag list (or *) names etag, by
// the strong comparison (If-Match, RFC 9110 13.1.1: a weak tag, W/"...",
// never matches, as S3 and Azure answer a copy on one with 412) or the
// weak one (If-None-Match).
func ETagMatches(list []string, etag string, strong bool) bool {
	weak := func(e string) bool { return strings.HasPrefix(e, "W/") }
	norm := func(e string) string { return strings.Trim(strings.TrimPrefix(e, "W/"), `"`) }
	etag = strings.TrimSpace(etag)
	for _, l := range list {
		for _, e := range strings.Split(l, ",") {
			e = strings.TrimSpace(e)
			switch {
			case e == "*":
				return true
			case strong && (weak(e) || weak(etag)):
			case norm(e) == norm(etag):
				return true
			}
		}
	}
	return false
}

// ReplaceMeta replaces the metadata headers of h (those whose canonical
// name begins with prefix, "X-Amz-Meta-", "X-Ms-Meta-") with src's.
func ReplaceMeta(h, src http.Header, prefix string) {
	for k := range h {
		if strings.HasPrefix(k, prefix) {
			delete(h, k)
		}
	}
	CopyMeta(h, src, prefix)
}

// CopyMeta copies the metadata headers of src (prefix as ReplaceMeta's)
// into h.
func CopyMeta(h, src http.Header, prefix string) {
	for k, v := range src {
		if strings.HasPrefix(k, prefix) {
			h[k] = v
		}
	}
}
