package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ProcCPU is a process's CPU time: the sum over its threads of
// /proc/PID/task/TID/schedstat (nanoseconds on a CPU; Go's threads live as
// long as the process, so none is lost to an exited one).
func ProcCPU(t testing.TB, pid int) time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var d time.Duration
	for _, task := range tasks {
		data, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
		d += time.Duration(ns)
	}
	return d
}
