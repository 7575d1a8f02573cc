package upstreamconn

import "net/http"

// NewH2C returns a transport speaking HTTP/2 over cleartext, with prior
// knowledge, to http:// upstreams: std's settings (dialer, pool, timeouts)
// with HTTP/1 off, so a request to an upstream that does not speak it fails
// rather than falling back to HTTP/1.1 framing (upstream.h2c).
//
// Why it keeps connections after writes where HTTP/1.1 cannot: an HTTP/2
// body travels in DATA frames of its own stream, ended by END_STREAM, and
// an upstream that answers without reading it resets or drains that
// stream; nothing of a body can be read as another request, and no answer
// can be taken for another stream's. So every request, writes included,
// shares the pooled connections.
func NewH2C(std *http.Transport) *http.Transport {
	t := std.Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSClientConfig = nil
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t.Protocols = &p
	return t
}
