package s3

import (
	"crypto/tls"
	"net/http"

	httpup "github.com/fencegate/fencegate/adapters/http"
)

// ConnBufferSize is the read and write buffer of each upstream connection
// of NewTransport.
const ConnBufferSize = 8 << 10

// NewTransport returns the transport for S3 upstreams: the gateway's
// upstream transport (httpup.NewTransport: no environment proxy, the same
// pool and timeouts) with ConnBufferSize connection buffers instead of
// 64 KiB ones. An S3 request's head and answer are a few KiB, and bodies
// bypass the buffers (net/http copies them to the socket in 32 KiB steps
// once the head is written), so large buffers gain nothing; but every new
// connection allocates and clears them, and VersityGW answers every
// request with Connection: close unless run with --keep-alive: at 64 KiB
// that was 128 KiB cleared per forwarded request.
func NewTransport(tlsConfig *tls.Config) *http.Transport {
	t := httpup.NewTransport(tlsConfig)
	t.ReadBufferSize, t.WriteBufferSize = ConnBufferSize, ConnBufferSize
	return t
}
