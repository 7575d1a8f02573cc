//go:build unix

package upstreamconn

import (
	"net"
	"syscall"
)

// peekCheck returns the check of a connection's read side that does not
// wait: a peek finds data waiting (connData), nothing to read on an open
// connection (connIdle), or the end of the stream or an error (connGone).
// An idle HTTP/1.1 connection the server closed reads EOF (or a reset); a
// connection whose answer has begun has data. The raw connection and the
// peek are made once per connection, not per check.
func peekCheck(c net.Conn) func() connState {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() connState { return connUnknown }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() connState { return connGone }
	}
	var (
		buf   [1]byte
		state connState
	)
	peek := func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK:
			state = connIdle
		case rerr == nil && n > 0:
			state = connData
		default:
			state = connGone
		}
		return true // never wait for the poller
	}
	return func() connState {
		state = connGone
		if rc.Read(peek) != nil {
			return connGone
		}
		return state
	}
}
