package testenv

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A descriptor the test process holds without close-on-exec (as a fuzz
// worker holds its coordinator's pipes) does not reach the servers it
// starts.
func TestInheritedDescriptorsNotPassedOn(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // no O_CLOEXEC, as inherited
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	fds := func() []string {
		out, err := exec.Command("sh", "-c", "ls /proc/$$/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(out))
	}
	has := func(list []string, fd int) bool {
		for _, f := range list {
			if f == strconv.Itoa(fd) {
				return true
			}
		}
		return false
	}
	if !has(fds(), p[1]) {
		t.Fatalf("the child did not inherit fd %d before: the check cannot fail", p[1])
	}
	closeInheritedOnExec()
	if got := fds(); has(got, p[0]) || has(got, p[1]) {
		t.Fatalf("a child still inherits the pipe (fds %v): %v", p, got)
	}
}
