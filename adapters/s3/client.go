package s3

import (
	"crypto/tls"

	"github.com/fencegate/fencegate/adapters/h1"
	httpup "github.com/fencegate/fencegate/adapters/http"
)

// NewTransport returns the transport for S3 upstreams: h1.Transport over
// the gateway's upstream transport (httpup.NewTransport: no environment
// proxy, the same pool and timeouts) with h1.ConnBufferSize connection
// buffers instead of 64 KiB ones, for the requests h1 does not carry
// (https). S3 heads and answers are a few KiB and bodies bypass the
// buffers, so large buffers gain nothing.
func NewTransport(tlsConfig *tls.Config) *h1.Transport {
	std := httpup.NewTransport(tlsConfig)
	std.ReadBufferSize, std.WriteBufferSize = h1.ConnBufferSize, h1.ConnBufferSize
	return h1.NewTransport(std)
}
