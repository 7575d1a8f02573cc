//go:build unix

package h1

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open with nothing to
// read: a peek that does not wait finds no data and no end of stream. An
// idle HTTP/1.1 connection the server closed reads EOF (or a reset).
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for the poller
	})
	return err == nil && ok
}
