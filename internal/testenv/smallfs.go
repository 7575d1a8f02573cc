package testenv

import (
	"os/exec"
	"testing"
)

// SmallFS mounts a tmpfs of the given size (mount's syntax: "32m") on a
// new temporary directory and returns it; it is unmounted when the test
// ends. It is the disk that fills up in the full-disk tests: a real
// filesystem answering ENOSPC, not a simulated error. Mounting needs root
// (CI runs as root); elsewhere the test is skipped unless CI=true.
func SmallFS(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		missing(t, "a tmpfs mount", "mounting needs root: "+string(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
