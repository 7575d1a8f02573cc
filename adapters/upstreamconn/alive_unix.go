//go:build unix

package upstreamconn

import (
	"net"
	"syscall"
)

// aliveCheck returns the check of an idle connection: still open with
// nothing to read, i.e. a peek that does not wait finds no data and no end
// of stream. An idle HTTP/1.1 connection the server closed reads EOF (or a
// reset). The raw connection and the peek are made once per connection,
// not per check.
func aliveCheck(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() bool { return true }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	var (
		buf  [1]byte
		open bool
	)
	peek := func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for the poller
	}
	return func() bool {
		open = false
		return rc.Read(peek) == nil && open
	}
}
