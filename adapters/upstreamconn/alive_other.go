//go:build !unix

package upstreamconn

import "net"

// peekCheck cannot peek without waiting here: an idle connection the
// server closed fails its next request (a GET or HEAD is sent again), and
// an answer that began before a body was sent whole is not seen, so
// KeepBodies keeps no connection that carried a body (connUnknown).
func peekCheck(net.Conn) func() connState { return func() connState { return connUnknown } }
