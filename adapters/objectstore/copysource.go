package objectstore

import (
	"net/http"
	"strings"
	"time"
)

// A stamped copy that would take the source's metadata (the source's stamp
// included, from which `fence rebuild` would rebuild the destination's
// fence below its real one) is sent by S3's and Azure's dialects with the
// source's metadata read by the gateway and the copy's stamp, on the
// condition that the source is still the version read. SourceConditions
// and ReplaceMeta are the steps they share.

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
	failed := hasIM && !ETagMatches(im, etag) || hasINM && ETagMatches(inm, etag)
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

// ETagMatches reports whether an entity-tag list (or *) names etag.
func ETagMatches(list []string, etag string) bool {
	norm := func(e string) string { return strings.Trim(strings.TrimPrefix(strings.TrimSpace(e), "W/"), `"`) }
	for _, l := range list {
		for _, e := range strings.Split(l, ",") {
			if strings.TrimSpace(e) == "*" || norm(e) == norm(etag) {
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
