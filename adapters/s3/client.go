package s3

import (
	"crypto/tls"

	"github.com/fencegate/fencegate/adapters/relay"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
)

// NewTransport returns the transport for S3 upstreams: upstreamconn.Transport over
// the gateway's upstream transport (relay.NewTransport: no environment
// proxy, the same pool and timeouts) with upstreamconn.ConnBufferSize connection
// buffers instead of 64 KiB ones, for the requests upstreamconn does not carry
// (https). S3 heads and answers are a few KiB and bodies bypass the
// buffers, so large buffers gain nothing.
func NewTransport(tlsConfig *tls.Config) *upstreamconn.Transport {
	std := relay.NewTransport(tlsConfig)
	std.ReadBufferSize, std.WriteBufferSize = upstreamconn.ConnBufferSize, upstreamconn.ConnBufferSize
	return upstreamconn.NewTransport(std)
}
