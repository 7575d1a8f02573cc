package gcs

import (
	"github.com/fencegate/fencegate/adapters/objectstore"
	"github.com/fencegate/fencegate/adapters/upstreamconn"
)

// NewTransport returns the transport for GCS upstreams
// (objectstore.NewTransport).
//
// Writes keep their connections (upstreamconn.Transport.KeepBodies). The store's
// front ends, and fake-gcs-server (Go's net/http server), read or discard
// the body of every request they answer, or close the connection, so no
// worker's body is ever taken for a request of its own on a kept
// connection. Closing after each write instead cost a connection per
// object: a dial (and against https, a TLS handshake) on the gateway's
// side and an accept on the store's, which made a 4 KiB upload through the
// gateway take twice as long as one straight to fake-gcs-server.
// `fencegate doctor` checks the store's behaviour (the unread-body probe)
// and fails the route of a store that takes an unread body for a request.
func NewTransport() *upstreamconn.Transport {
	t := objectstore.NewTransport(nil)
	t.KeepBodies = true
	return t
}
