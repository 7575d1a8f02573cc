package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
	"github.com/fencegate/fencegate/resource"
)

// `precondition: etag` on a plain HTTP route: every fenced write to one
// object (the route's resource names one upstream path) is made
// conditional on the ETag the gateway's last accepted write produced, with
// RFC 9110 If-Match, or If-None-Match: * when the gateway knows the object
// absent. The bookkeeping is package precondition's, shared with the S3
// adapter; docs/http-precondition.md has the details and Apache's quirks.

// forwardConditional forwards a fenced write with the gateway's
// precondition and records its outcome.
func (h *Upstream) forwardConditional(w http.ResponseWriter, r *http.Request, req *gateway.Request) error {
	f := &forwarding{h: h, req: req}
	if req.Token == 0 || len(req.Resources) == 0 {
		return Send(w, r, req, f) // not a fenced write
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return Send(w, r, req, f) // a read fenced by fence_reads
	}
	if ns := namespaceOp(r.Method, req.Resources); ns != nil {
		return h.forwardNamespace(w, r, f, ns)
	}
	kind, conditional := precondition.Opaque, false
	switch r.Method {
	case http.MethodPut, http.MethodPatch:
		kind, conditional = precondition.Replace, true
	case http.MethodDelete:
		kind, conditional = precondition.Delete, true
	}
	// POST (and other fenced methods) may change the object or create
	// another: fenced, tracked as unknown, not made conditional. A worker's
	// own precondition takes the place of the gateway's only when it pins
	// a version (precondition.PinsVersion), which a delayed request cannot
	// satisfy after a newer write either. If-Match: *, If-None-Match on an
	// ETag and If-Unmodified-Since (one-second resolution) hold for a newer
	// owner's version too: the gateway's If-Match is set over them.
	if conditional && precondition.PinsVersion(r.Header) {
		conditional = false
	}
	path := req.Path
	auth := r.Header.Get("Authorization")
	ew, err := h.tracker.Begin(r.Context(), req.Resources[0], req.Token, kind, conditional,
		func(ctx context.Context) (string, error) { return h.headETag(ctx, path, auth) })
	if err != nil {
		return err
	}
	if kind == precondition.Delete {
		// The object may be a collection: its members go with it.
		if err := h.forgetBelow(r.Context(), req.Resources, req.Token); err != nil {
			ew.Failed(r.Context())
			return err
		}
	}
	f.ew = ew
	err = Send(w, r, req, f)
	if err != nil {
		var ref *fencegate.Error
		if !errors.As(err, &ref) {
			// The request may or may not have reached the upstream.
			ew.Failed(r.Context())
		}
	}
	if kind == precondition.Delete {
		h.forgetBelow(context.WithoutCancel(r.Context()), req.Resources, req.Token)
	}
	return err
}

// namespaceOp returns the keys below which a request may change objects
// without naming them (WebDAV: a collection deleted, moved, or a
// Destination overwritten by a COPY or MOVE; any request with several
// keys), or nil for a write of one object. DELETE of one key stays a
// conditional write of that key, and its members are forgotten after it.
func namespaceOp(method string, keys []string) []string {
	switch {
	case len(keys) > 1, method == "MOVE", method == "COPY":
		return keys
	}
	return nil
}

// forwardNamespace forwards a request that changes objects below its keys:
// each key's record is marked unknown before the forward (the outcome of
// an opaque write), and so is every record below each key, before and
// after (a member written meanwhile by the same token is forgotten too):
// the gateway's own forward must never leave a record naming a version
// it replaced, or the owner's next write would fail its precondition.
func (h *Upstream) forwardNamespace(w http.ResponseWriter, r *http.Request, f *forwarding, keys []string) error {
	req, token := f.req, f.req.Token
	ws := make(etagWrites, 0, len(keys))
	for _, k := range keys {
		// Not conditional and opaque: nothing to learn, no HEAD.
		ew, err := h.tracker.Begin(r.Context(), k, token, precondition.Opaque, false, nil)
		if err != nil {
			return err
		}
		ws = append(ws, ew)
	}
	if err := h.forgetBelow(r.Context(), keys, token); err != nil {
		return err
	}
	f.ws = ws
	err := Send(w, r, req, f)
	if err != nil {
		var ref *fencegate.Error
		if !errors.As(err, &ref) {
			for _, ew := range ws {
				ew.Failed(r.Context())
			}
		}
	}
	h.forgetBelow(context.WithoutCancel(r.Context()), keys, token)
	return err
}

// forgetBelow marks the records below each key unknown; it fails closed
// (the write is not forwarded) when the store cannot.
func (h *Upstream) forgetBelow(ctx context.Context, keys []string, token int64) error {
	for _, k := range keys {
		if err := h.tracker.ForgetBelow(ctx, resource.MemberPrefix(k), token); err != nil {
			return fencegate.Unavailable(k, err)
		}
	}
	return nil
}

// etagWrites are the records of a namespace request's keys: all opaque,
// not conditional, so the answer is only recorded.
type etagWrites []*precondition.Write

// discard reads a little of an answer the gateway does not need (so that
// the connection can be reused) and closes it.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
}

// headETag asks the upstream for the ETag header of the object at path ("" if
// it does not exist), with the route's injected headers and the worker's
// Authorization, as the write itself would be sent.
func (h *Upstream) headETag(ctx context.Context, path, auth string) (string, error) {
	base := strings.TrimSuffix(h.target.Path, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, h.target.Scheme+"://"+h.target.Host, nil)
	if err != nil {
		return "", err
	}
	req.URL.Path, req.URL.RawPath = base+unescapePath(path), base+path
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, vs := range h.inject {
		req.Header[k] = vs
	}
	resp, err := h.transport.RoundTrip(req)
	if err != nil {
		return "", err
	}
	discard(resp)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		if e := resp.Header.Get("ETag"); e != "" {
			return e, nil
		}
		// Without an ETag there is nothing to make a write conditional on;
		// "" would mean absent (If-None-Match: *).
		return "", fmt.Errorf("HEAD %s: the upstream answers no ETag", path)
	case http.StatusNotFound, http.StatusGone:
		return "", nil
	}
	return "", fmt.Errorf("HEAD %s: %s", path, resp.Status)
}

// CheckConditionalWrites runs the racing probe (precondition.Probe) against
// this upstream on a fresh probe object under dir (a path prefix where the
// gateway may write, e.g. "/fencegate-probe/"), with the route's injected
// headers, and deletes the object afterwards.
func (h *Upstream) CheckConditionalWrites(ctx context.Context, dir string, n int) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	path := "/" + strings.Trim(dir, "/") + "/fencegate-probe-" + hex.EncodeToString(rnd[:])
	path = strings.Replace(path, "//", "/", 1)
	p := &httpProbe{h: h, path: path}
	defer p.do(context.WithoutCancel(ctx), http.MethodDelete, "", "")
	return precondition.Probe(ctx, p, n)
}

type httpProbe struct {
	h    *Upstream
	path string
}

func (p *httpProbe) do(ctx context.Context, method, body, ifMatch string) (*http.Response, error) {
	base := strings.TrimSuffix(p.h.target.Path, "/")
	req, err := http.NewRequestWithContext(ctx, method, p.h.target.Scheme+"://"+p.h.target.Host+base+p.path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range p.h.inject {
		req.Header[k] = vs
	}
	if method == http.MethodPut {
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		} else {
			req.Header.Set("If-None-Match", "*")
		}
	}
	resp, err := p.h.transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	discard(resp)
	return resp, nil
}

func (p *httpProbe) Put(ctx context.Context, body, ifMatch string) (int, string, error) {
	resp, err := p.do(ctx, http.MethodPut, body, ifMatch)
	if err != nil {
		return 0, "", fmt.Errorf("probe PUT %s: %w", p.path, err)
	}
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

func (p *httpProbe) Head(ctx context.Context) (string, error) { return p.h.headETag(ctx, p.path, "") }
