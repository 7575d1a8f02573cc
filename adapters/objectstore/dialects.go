package objectstore

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
)

// What the dialects' constructors and their own requests to the store
// share.

// ParseEndpoint reads a route's store address (option names it in the
// error): an absolute http or https URL, its path without a trailing
// "/"; noQuery refuses a query.
func ParseEndpoint(option, raw string, noQuery bool) (*url.URL, error) {
	e, err := url.Parse(raw)
	if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || noQuery && e.RawQuery != "" {
		without := ""
		if noQuery {
			without = " without a query"
		}
		return nil, fmt.Errorf("%s must be an absolute http or https URL%s, got %q", option, without, raw)
	}
	e.Path = strings.TrimSuffix(e.Path, "/")
	return e, nil
}

// NewTransport returns the transport of an object-store upstream:
// upstreamconn.Transport over the gateway's upstream transport
// (relay.NewTransport: no environment proxy, the same pool and timeouts)
// with upstreamconn.ConnBufferSize connection buffers instead of 64 KiB
// ones, for the requests upstreamconn does not carry (https). Heads and
// answers are a few KiB and bodies bypass the buffers, so large buffers
// gain nothing.
func NewTransport(tlsConfig *tls.Config) *upstreamconn.Transport {
	std := relay.NewTransport(tlsConfig)
	std.ReadBufferSize, std.WriteBufferSize = upstreamconn.ConnBufferSize, upstreamconn.ConnBufferSize
	return upstreamconn.NewTransport(std)
}

// HeadVersion reads the answer to a HEAD (or GET) of one object, what
// names it in errors: "" if it does not exist (404), else the version
// header, which must be there.
func HeadVersion(resp *http.Response, what, header string) (string, error) {
	switch resp.StatusCode {
	case http.StatusNotFound:
		return "", nil
	case http.StatusOK:
		if v := resp.Header.Get(header); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("HEAD %s: no %s in the answer", what, header)
	}
	return "", fmt.Errorf("HEAD %s: %s", what, resp.Status)
}

// MetaValue finds an object's metadata value by name, in any case (the
// stores' metadata names are case-insensitive, and listings give them as
// written).
func MetaValue[V any](m map[string]V, name string) (v V, ok bool) {
	for k, mv := range m {
		if strings.EqualFold(k, name) {
			return mv, true
		}
	}
	return v, false
}

// KeepParams are the parameters of raw whose name keep accepts, as sent:
// the name decoded as the store reads it ("X-Amz-%53ignature",
// "fencegate%5Fsession"), the pairs not re-encoded.
func KeepParams(raw string, keep func(name string) bool) []string {
	var kept []string
	if raw == "" {
		return nil
	}
	for _, p := range strings.Split(raw, "&") {
		k, _, _ := strings.Cut(p, "=")
		if d, err := url.QueryUnescape(k); err == nil {
			k = d
		}
		if keep(k) {
			kept = append(kept, p)
		}
	}
	return kept
}
