// Package relay relays the writes the gateway admitted to plain HTTP(S)
// upstreams (the upstream adapter of HTTP routes): it forwards them to an
// upstream URL (bodies stream both ways, hop-by-hop headers and the
// gateway's token header dropped, X-Forwarded-* set; forward.go), injects
// the route's credentials, and with `precondition: etag` makes fenced
// writes conditional on the ETag of the gateway's last write
// (precondition.go).
//
// It also holds the streaming core every upstream adapter shares: Proxy
// (a reverse proxy whose transport errors go back to the gateway) and
// NewTransport (the gateway's own transport, never
// http.DefaultTransport). The S3 adapter builds on them.
package relay

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/fencegate/fencegate/adapters/upstreamconn"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/precondition"
)

// Upstream forwards to a plain HTTP(S) upstream. It implements
// gateway.Upstream.
type Upstream struct {
	target    *url.URL
	inject    http.Header           // set on every forwarded request
	transport http.RoundTripper     // the forwards' and the ETag lookups'
	tracker   *precondition.Tracker // precondition: etag; nil: none
	keepHost  bool                  // PreserveHost
}

// Options configure New.
type Options struct {
	// URL is the upstream's absolute http(s) URL; its path prefixes every
	// forwarded path.
	URL string
	// Headers are set on every forwarded request (credential injection),
	// replacing the worker's own copies.
	Headers map[string]string
	// Transport carries the requests. Nil means a transport of the
	// gateway's own (never http.DefaultTransport, which others may tune):
	// upstreamconn.Transport over NewTransport(nil).
	Transport http.RoundTripper
	// ETags, if set, makes every fenced write conditional on the ETag the
	// gateway last wrote to its object (`precondition: etag`; see
	// precondition.go).
	ETags precondition.Store
	// PreserveHost sends the client's Host header upstream; false sends
	// the upstream URL's host. An upstream that compares the URLs inside
	// a request (WebDAV Destination and If:) with its Host needs the
	// client's (nginx's DAV module answers 400 otherwise).
	PreserveHost bool
	// Route names the route in logs.
	Route string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

var _ gateway.Upstream = (*Upstream)(nil)

// New returns an upstream forwarding to opts.URL.
func New(opts Options) (*Upstream, error) {
	u, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream url: %w", err)
	}
	h := &Upstream{target: u, inject: make(http.Header), keepHost: opts.PreserveHost}
	for k, v := range opts.Headers {
		h.inject.Set(k, v)
	}
	h.transport = opts.Transport
	if h.transport == nil {
		h.transport = upstreamconn.NewTransport(NewTransport(nil))
	}
	if opts.ETags != nil {
		h.tracker = &precondition.Tracker{Store: opts.ETags, Route: opts.Route, Log: opts.Logger}
	}
	return h, nil
}

// forwarding is one forward as Send carries it: the gateway's view of the
// request and, for a tracked write, its precondition bookkeeping, handed
// to the rewrite and the transport as an argument.
type forwarding struct {
	h   *Upstream
	req *gateway.Request
	ew  *precondition.Write // a tracked write of one object; nil: none
	ws  etagWrites          // a namespace request's records; nil: none
}

// Rewrite prepares the outbound request (Sender).
func (f *forwarding) Rewrite(pr *httputil.ProxyRequest) {
	f.h.rewrite(pr, f.req)
	if f.ew != nil {
		f.ew.Apply(pr.Out.Header)
	}
}

// RoundTrip carries the outbound request and records a tracked write's
// outcome from the upstream's answer; a 412 to the gateway's precondition
// becomes the precondition_failed refusal (the answer is discarded).
func (f *forwarding) RoundTrip(out *http.Request) (*http.Response, error) {
	resp, err := f.h.transport.RoundTrip(out)
	switch {
	case err != nil:
		return resp, err
	case f.ws != nil:
		for _, ew := range f.ws {
			ew.Answered(out.Context(), resp.StatusCode, "")
		}
		return resp, nil
	case f.ew != nil:
		return f.ew.Response(out.Context(), resp)
	}
	return resp, nil
}

func (h *Upstream) rewrite(pr *httputil.ProxyRequest, req *gateway.Request) {
	pr.Out.URL.Scheme = h.target.Scheme
	pr.Out.URL.Host = h.target.Host
	// Forward the canonical path the fence key was derived from, not the
	// client's spelling of it (docs/design.md §3, step 4).
	path := req.Path
	base := strings.TrimSuffix(h.target.Path, "/")
	pr.Out.URL.Path = base + unescapePath(path)
	pr.Out.URL.RawPath = base + path
	pr.Out.Host = ""
	if h.keepHost {
		pr.Out.Host = pr.In.Host
	}
	if d := pr.Out.Header.Get("Destination"); d != "" && base != "" {
		// The Destination's path is mapped onto the upstream as the
		// request's is (the gateway checked it; an unparsable one is left
		// for the upstream to refuse).
		if du, err := url.Parse(d); err == nil && strings.HasPrefix(du.EscapedPath(), "/") {
			rp := du.EscapedPath()
			du.Path, du.RawPath = base+unescapePath(rp), base+rp
			pr.Out.Header.Set("Destination", du.String())
		}
	}
	pr.SetXForwarded()
	// Credentials are the gateway's to send: the worker's own copy of an
	// injected header is dropped, so workers never hold a way around the
	// fence.
	for k, vs := range h.inject {
		pr.Out.Header[k] = vs
	}
	if req.Body != nil {
		// The proxy wraps a client's body (noCloseBody), so the transport
		// would stream it after flushing the headers on their own; a body
		// the gateway holds whole goes with the headers, in one write.
		pr.Out.Body = io.NopCloser(bytes.NewReader(req.Body))
	}
}

// Forward implements gateway.Upstream.
func (h *Upstream) Forward(w http.ResponseWriter, r *http.Request, req *gateway.Request) error {
	if h.tracker != nil {
		return h.forwardConditional(w, r, req)
	}
	return Send(w, r, req, &forwarding{h: h, req: req})
}

func unescapePath(p string) string {
	u, err := url.PathUnescape(p)
	if err != nil {
		return p
	}
	return u
}

// Proxy is the streaming core shared by upstream adapters: a reverse proxy
// whose transport errors are returned to the gateway instead of being
// answered with a bare 502. Requests are forwarded by forward
// (forward.go); protocol upgrades, which hand the connection over, by
// httputil.ReverseProxy.
type Proxy struct {
	transport http.RoundTripper
	rewrite   func(*httputil.ProxyRequest)
	upgrades  *httputil.ReverseProxy
}

// NewProxy returns a Proxy over transport (nil: NewTransport(nil)) that
// prepares outbound requests with rewrite. rewrite may replace Out's body
// and headers but must keep its context.
func NewProxy(transport http.RoundTripper, rewrite func(*httputil.ProxyRequest)) *Proxy {
	if transport == nil {
		transport = NewTransport(nil)
	}
	p := &Proxy{transport: transport, rewrite: rewrite}
	p.upgrades = upgradeProxy(rewrite, transport, "")
	return p
}

// largeStepsBody wraps an outbound body to be copied in large steps.
func largeStepsBody(pr *httputil.ProxyRequest) {
	if b := pr.Out.Body; b != nil && b != http.NoBody {
		if _, ok := b.(io.WriterTo); !ok {
			pr.Out.Body = largeSteps{b}
		}
	}
}

// upgradeProxy is the ReverseProxy that serves protocol upgrades, without
// the header drop ("": none; see Send).
func upgradeProxy(rewrite func(*httputil.ProxyRequest), transport http.RoundTripper, drop string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if drop != "" {
				delete(pr.Out.Header, drop)
				delete(pr.Out.Trailer, drop)
			}
			rewrite(pr)
			largeStepsBody(pr)
		},
		Transport:  transport,
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if ew, ok := w.(*errWriter); ok {
				ew.err = err
			}
		},
	}
}

// Forward serves r through the proxy and returns its transport error.
func (p *Proxy) Forward(w http.ResponseWriter, r *http.Request) error {
	if upgradeType(r.Header) == "" {
		return forward(w, r, "", p.rewrite, p.transport)
	}
	return serveUpgrade(p.upgrades, w, r)
}

// A Sender prepares and carries one forward: an adapter whose rewrite and
// transport need the request's state (its target, its precondition) hands
// Send that state as a Sender, rather than a context value each must
// fetch.
type Sender interface {
	// Rewrite prepares the outbound request (as NewProxy's rewrite).
	Rewrite(*httputil.ProxyRequest)
	http.RoundTripper
}

// Send serves r as Proxy.Forward does, prepared and carried by s. req is
// the gateway's view of r: the header that carried its token
// (req.TokenHeader) is left out of the forward here, before s's rewrite,
// the one place a forward loses it, for every upstream adapter.
func Send(w http.ResponseWriter, r *http.Request, req *gateway.Request, s Sender) error {
	if upgradeType(r.Header) == "" {
		return forward(w, r, req.TokenHeader, s.Rewrite, s)
	}
	return serveUpgrade(upgradeProxy(s.Rewrite, s, req.TokenHeader), w, r)
}

func serveUpgrade(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) error {
	ew := &errWriter{ResponseWriter: w}
	rp.ServeHTTP(ew, r)
	return ew.err
}

// upgradeType is the protocol an upgrade request asks for ("" for
// others), as ReverseProxy reads it.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// errWriter carries the proxy's transport error from its ErrorHandler,
// which ReverseProxy calls with the writer it was given, back to Forward.
type errWriter struct {
	http.ResponseWriter
	err error
}

// Unwrap lets http.ResponseController reach the underlying writer (flush,
// deadlines, hijack), which ReverseProxy relies on.
func (w *errWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// NewTransport returns the gateway's transport for upstreams, with the given
// TLS settings (nil: system roots).
func NewTransport(tlsConfig *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy: nil, // never route fenced writes through an environment proxy
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2: tlsConfig != nil,
		TLSClientConfig:   tlsConfig,
		// Larger socket buffers than the 4 KiB default: request bodies are
		// copied through them, and large objects dominate the cost of a
		// proxy when each copy moves a few KiB.
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// BufferSize is the size of one copy step of a streamed body (the proxy's
// pooled buffers; the S3 adapter's chunk reader).
const BufferSize = 32 << 10

// StreamStep is the size of one copy step of a streamed request body
// (largeSteps).
const StreamStep = upstreamconn.StreamStep

// largeSteps is a streamed request body that copies itself upstream in
// steps of StreamStep: it fills a step before writing it (as nginx buffers
// request bodies), so the upstream connection gets a few large writes
// instead of one per 32 KiB that arrived. The transport sends a request
// body with io.Copy in 32 KiB steps unless the body is an io.WriterTo, and
// the proxy wraps every client body in a type that is not. The buffers are
// pooled, so memory follows the number of bodies being sent at once, never
// a body's size.
type largeSteps struct{ io.ReadCloser }

// StreamBuffer returns a pooled buffer of StreamStep bytes (upstreamconn's pool: one
// for every upstream client); give it back with PutStreamBuffer.
func StreamBuffer() *[]byte { return upstreamconn.StreamBuffer() }

// PutStreamBuffer returns a buffer of StreamBuffer to the pool.
func PutStreamBuffer(b *[]byte) { upstreamconn.PutStreamBuffer(b) }

func (b largeSteps) WriteTo(w io.Writer) (int64, error) {
	buf := StreamBuffer()
	defer PutStreamBuffer(buf)
	// Not io.CopyBuffer: it would hand the copy to w's ReadFrom (the
	// connection's bufio.Writer), which copies in 32 KiB steps again.
	var n int64
	for {
		nr, err := fill(b.ReadCloser, *buf)
		if nr > 0 {
			nw, werr := w.Write((*buf)[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// fill reads into buf until it is full or r fails (io.ReadFull, but with
// r's own error: a body cut short stays io.ErrUnexpectedEOF, never EOF).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		nr, err := r.Read(buf[n:])
		n += nr
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// bufferPool recycles the copy buffers of answers (forward, and the
// ReverseProxy of upgrades).
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, BufferSize); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
