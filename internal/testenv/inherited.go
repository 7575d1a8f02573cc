package testenv

import (
	"os"
	"strconv"
	"syscall"
)

// A fuzz worker (go test -fuzz) inherits its coordinator's pipes and
// shared memory as descriptors 3–5, without close-on-exec. A server
// started from it (Apache, nginx, a store) would inherit them too, and
// outlive a worker killed at the end of the fuzz time (Pdeathsig reaches
// the server's first process, not the children it forked): the
// coordinator then waited for ever for the end of a pipe the orphans still
// held. Descriptors Go opens itself are close-on-exec already, so marking
// every inherited one so touches nothing else.
func init() { closeInheritedOnExec() }

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
