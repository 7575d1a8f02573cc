package relay

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fencegate/fencegate/adapters/upstreamconn"

	"golang.org/x/net/http/httpguts"
)

// forward is Proxy's request path for everything but protocol upgrades:
// httputil.ReverseProxy's ServeHTTP with the same header rules, minus the
// work a gateway that already checked the request does not need. Per
// forwarded write it saves the request clone's header and value copies,
// the response header's re-canonicalized copy, a Content-Type parse and the
// copy buffer's interface round trip: a tenth of the allocations of a
// small write, and about as much of the gateway's CPU per write
// (docs/performance.md).
//
// The rules kept, in ReverseProxy's order: hop-by-hop request headers
// (RFC 9110 §7.6.1: those named in Connection, and RFC 2616's list) and the
// client's Forwarded and X-Forwarded-* dropped, "TE: trailers" passed on,
// unparsable query parameters re-encoded, no Go User-Agent added; 1xx
// answers relayed as they come; hop-by-hop answer headers dropped, trailers
// announced and relayed; answers of unknown length and event streams
// flushed as they arrive; a failed answer copy aborts the client's
// connection (http.ErrAbortHandler) so a cut answer never looks whole.
func forward(w http.ResponseWriter, r *http.Request, drop string, rewrite func(*httputil.ProxyRequest), transport http.RoundTripper) error {
	var (
		mu   sync.Mutex
		done bool // RoundTrip returned: 1xx may no longer touch w's headers
	)
	trace := &httptrace.ClientTrace{
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			if done {
				return nil
			}
			h := w.Header()
			copyHeader(h, http.Header(header))
			w.WriteHeader(code)
			clear(h) // WriteHeader keeps a 1xx's headers for the final answer
			return nil
		},
	}
	// The one copy of r: its context carries the 1xx relay, and rewrite
	// must keep Out's context.
	spell := new(upstreamconn.Spelling)
	out := r.WithContext(upstreamconn.WithSpelling(httptrace.WithClientTrace(r.Context(), trace), spell))
	out.Header = requestHeader(r.Header, drop)
	u := *r.URL
	out.URL = &u
	if r.Trailer != nil {
		// The names, never a value: trailer values arrive after the
		// gateway decided on the request, and a store may merge them into
		// its headers (VersityGW does: an unannounced, unsigned
		// x-amz-expected-bucket-owner trailer decided a DeleteObjects).
		// Values that arrive while the body streams were never relayed
		// (ReverseProxy's copy is taken before them); a body read whole
		// before the forward (a dialect's Inspect) has filled them, the
		// unannounced ones included, which the gateway never checked.
		out.Trailer = make(http.Header, len(r.Trailer))
		for k := range r.Trailer {
			out.Trailer[k] = nil
		}
		delete(out.Trailer, drop)
	}
	out.Close = false
	if r.ContentLength == 0 {
		out.Body = nil // no body, so the transport may retry an idempotent request
	}
	if out.Body != nil {
		// The transport closes the body it sends; the client's must stay
		// open for the server, and no read may follow the handler's return.
		nc := &noCloseBody{rc: out.Body}
		out.Body = nc
		defer nc.Close()
	}
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		out.Header["Te"] = []string{"trailers"}
	}
	out.URL.RawQuery = cleanQueryParams(out.URL.RawQuery)
	pr := &httputil.ProxyRequest{In: r, Out: out}
	rewrite(pr)
	largeStepsBody(pr)
	out = pr.Out
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = noUserAgent
	}

	res, err := transport.RoundTrip(out)
	mu.Lock()
	done = true
	mu.Unlock()
	if err != nil {
		return err
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Only an upgrade request (served by the ReverseProxy) may switch.
		res.Body.Close()
		return errUnrequestedSwitch
	}
	if res.StatusCode < 100 {
		// http.ReadResponse takes any three digits; WriteHeader would
		// panic on such a code.
		res.Body.Close()
		return errMalformedStatus
	}

	h := w.Header()
	copyAnswerHeader(h, res.Header, spell)
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)

	var dst io.Writer = w
	if res.ContentLength == -1 || isEventStream(res.Header.Get("Content-Type")) {
		dst = flushWriter{w: w, flush: http.NewResponseController(w).Flush}
	}
	buf := buffers.Get().(*[]byte)
	err = copyAnswer(dst, res.Body, *buf)
	buffers.Put(buf)
	if err != nil {
		res.Body.Close()
		if r.Context().Value(http.ServerContextKey) != nil {
			panic(http.ErrAbortHandler)
		}
		return nil // as ReverseProxy outside a server: the answer has started
	}
	res.Body.Close() // now, not deferred: it fills res.Trailer

	if len(res.Trailer) > 0 {
		// Forces chunking, so net/http does not compute a Content-Length
		// for a short answer that has trailers to send.
		http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		copyHeader(h, res.Trailer)
		return nil
	}
	for k, vv := range res.Trailer {
		k = http.TrailerPrefix + k
		for _, v := range vv {
			h.Add(k, v)
		}
	}
	return nil
}

// noUserAgent keeps the transport from adding Go's User-Agent; shared by
// every request (one element: an append copies it).
var noUserAgent = []string{""}

var (
	errUnrequestedSwitch = errors.New("upstream switched protocols without an upgrade request")
	errMalformedStatus   = errors.New("upstream answered with a status code below 100")
)

// hopHeader reports whether k is one of RFC 2616 §13.5.1's hop-by-hop
// headers (or Proxy-Connection, which libcurl sends), dropped both ways
// whether or not Connection names them: ReverseProxy's list.
func hopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// requestHeader returns the header to send upstream for in: in without
// hop-by-hop headers, the client's own forwarding headers (the rewrite
// sets X-Forwarded-* anew) and the header drop (canonical; "": none). The
// value slices are shared with in, capped at their length so an append to
// one never writes into in's.
func requestHeader(in http.Header, drop string) http.Header {
	h := make(http.Header, len(in)+4) // room for X-Forwarded-*, User-Agent
	for k, vv := range in {
		switch {
		case hopHeader(k), k == "Forwarded", k == "X-Forwarded-For", k == "X-Forwarded-Host", k == "X-Forwarded-Proto", k == drop:
			continue
		}
		h[k] = vv[:len(vv):len(vv)]
	}
	dropConnectionNamed(h, in["Connection"])
	return h
}

// copyAnswerHeader adds an answer's end-to-end headers to dst: src without
// hop-by-hop headers and those its Connection names. Those are the
// answer's own: a header dst already holds (set by the gateway) stays,
// whatever the upstream's Connection says, as with ReverseProxy. src's
// keys are canonical (http.ReadResponse made them); each line goes to dst
// as the upstream spelled its name (spell), but for the fields the server
// writing the answer looks up by their canonical key (serverOwned). src's value slices
// are taken over where dst has none (src is not used after).
func copyAnswerHeader(dst, src http.Header, spell *upstreamconn.Spelling) {
	dropConnectionNamed(src, src["Connection"])
	for k, vv := range src {
		if hopHeader(k) {
			continue
		}
		if prev, ok := dst[k]; ok {
			dst[k] = append(prev, vv...)
			continue
		}
		names := spell.Names(k)
		if names == nil || len(names) != len(vv) || serverOwned(k) {
			dst[k] = vv
			continue
		}
		// Each line under its own spelling (VersityGW sends
		// X-Amz-Request-Id and x-amz-request-id both).
		for i, v := range vv {
			dst[names[i]] = append(dst[names[i]], v)
		}
	}
}

// serverOwned reports whether net/http's server (and workerserver, which frames
// answers as it does) reads k from an answer's header by its canonical key
// to frame the answer, or adds it when that key is absent: under another
// spelling it would be sent twice, or the framing would be wrong. These
// keep the canonical spelling.
func serverOwned(k string) bool {
	switch k {
	case "Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding", "Date", "Trailer", "Connection":
		return true
	}
	return false
}

// dropConnectionNamed deletes from h the headers the Connection values
// conn name (RFC 9110 §7.6.1).
func dropConnectionNamed(h http.Header, conn []string) {
	for _, f := range conn {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

// isEventStream reports whether Content-Type ct is text/event-stream,
// which is flushed as it arrives; the cheap prefix test spares a
// mime.ParseMediaType on every other answer.
func isEventStream(ct string) bool {
	ct = strings.TrimLeft(ct, " \t")
	if len(ct) < len("text/event-stream") || !strings.EqualFold(ct[:len("text/event-stream")], "text/event-stream") {
		return false
	}
	base, _, _ := mime.ParseMediaType(ct)
	return base == "text/event-stream"
}

// flushWriter flushes after every write (ReverseProxy's negative flush
// interval).
type flushWriter struct {
	w     io.Writer
	flush func() error
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.flush()
	}
	return n, err
}

// copyAnswer copies src to dst through buf and returns write errors and
// read errors other than EOF (ReverseProxy's copyBuffer).
func copyAnswer(dst io.Writer, src io.Reader, buf []byte) error {
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			if werr != nil {
				return werr
			}
			if nw != nr {
				return io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// noCloseBody is a client's request body as the transport sees it: Close
// only marks it closed, and a read after that fails.
type noCloseBody struct {
	rc     io.ReadCloser
	closed atomic.Bool
}

func (b *noCloseBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("read of a request body after its forward ended")
	}
	return b.rc.Read(p)
}

func (b *noCloseBody) Close() error {
	b.closed.Store(true)
	return nil
}

// cleanQueryParams re-encodes a query with parameters Go's URL parsing
// drops (';' separators, bad escapes), so the upstream sees the query the
// gateway parsed; from net/http/httputil (BSD licence), without its
// GODEBUG knob.
func cleanQueryParams(s string) string {
	reencode := func(s string) string {
		v, _ := url.ParseQuery(s)
		return v.Encode()
	}
	if strings.Count(s, "&")+1 > maxQueryParams {
		return reencode(s)
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencode(s)
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				return reencode(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

// maxQueryParams is net/url's limit on the pairs it parses.
const maxQueryParams = 10000

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
