package s3

import (
	"crypto/tls"

	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
)

// NewTransport returns the transport for S3 upstreams
// (objectstore.NewTransport).
func NewTransport(tlsConfig *tls.Config) *upstreamconn.Transport {
	return objectstore.NewTransport(tlsConfig)
}
