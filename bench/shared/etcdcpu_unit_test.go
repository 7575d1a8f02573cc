package shared

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fencegate/fencegate/bench/cpustat"
)

// TestProcCPU: procCPU reads this process's CPU as getrusage does (within
// the clock ticks of /proc), so the members' figures are comparable to
// the benchmark process's.
func TestProcCPU(t *testing.T) {
	// Some CPU of its own first (on a loaded machine, however long it
	// takes).
	for end := time.Now().Add(10 * time.Second); cpustat.Self() < 200*time.Millisecond && time.Now().Before(end); {
	}
	got, want := procCPU(os.Getpid()), cpustat.Self()
	if got < 100*time.Millisecond || got > want+20*time.Millisecond || got < want-50*time.Millisecond {
		t.Fatalf("procCPU = %v, getrusage = %v", got, want)
	}
	if procCPU(-1) != 0 {
		t.Fatal("procCPU of no process is not 0")
	}
}

// TestScatteredNoBursts: with the writes spread by scattered, a resource's
// writes are not bunched as strided's are: over the steps 64 clients make
// in 5 s at 3,000 writes/s, few of a resource's writes follow a gap of
// 100 steps or more (2 s, twice the marker idle time).
func TestScatteredNoBursts(t *testing.T) {
	long := func(path func(c, i, n int) int) float64 {
		last := make(map[int]int)
		n, gaps := 0, 0
		for i := range 300 {
			for c := range 64 {
				r := path(c, i, resources)
				if l, ok := last[r]; ok {
					n++
					if i-l >= 100 {
						gaps++
					}
				}
				last[r] = i
			}
		}
		return float64(gaps) / float64(n)
	}
	if s, b := long(scattered), long(strided); s > 0.01 || b < 0.05 {
		t.Fatalf("writes after a gap of 100 steps: scattered %.3f (want < 0.01), strided %.3f (want > 0.05: the bursts)", s, b)
	}
}

// TestWritePath: every shared benchmark (PostgreSQL and etcd) writes
// scattered by default, and strided with FENCEGATE_BENCH_STRIDE=1 or the
// etcd benchmark's older FENCEGATE_BENCH_ETCD_STRIDE=1; both stay within
// the n resources.
func TestWritePath(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want func(c, i, n int) int
	}{
		{"", scattered},
		{"FENCEGATE_BENCH_STRIDE", strided},
		{"FENCEGATE_BENCH_ETCD_STRIDE", strided},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("FENCEGATE_BENCH_STRIDE", "")
			t.Setenv("FENCEGATE_BENCH_ETCD_STRIDE", "")
			if tc.env != "" {
				t.Setenv(tc.env, "1")
			}
			for _, n := range []int{resources, pairResources} {
				path := writePath(n)
				for c := range 64 {
					for i := range 50 {
						if got := path(c, i); got != tc.want(c, i, n) || got < 0 || got >= n {
							t.Fatalf("n %d: writePath(%d, %d) = %d, want %d", n, c, i, got, tc.want(c, i, n))
						}
					}
				}
			}
		})
	}
}

// TestTreeCPU: treeCPU counts a child's CPU while it runs (a PostgreSQL
// backend) and after its parent waited for it (one that exited), so
// PostgreSQL's figure loses no backend that came and went.
func TestTreeCPU(t *testing.T) {
	self := os.Getpid()
	children := func() time.Duration { return treeCPU(self) - procCPU(self) }
	before := children()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var live time.Duration
	for end := time.Now().Add(20 * time.Second); live < 200*time.Millisecond && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		live = children() - before
	}
	cmd.Process.Kill()
	cmd.Wait()
	if live < 200*time.Millisecond {
		t.Fatalf("a running child's CPU: %v after 20 s (want >= 200ms)", live)
	}
	if reaped := children() - before; reaped < live-20*time.Millisecond {
		t.Fatalf("the child's CPU once waited for: %v, %v while it ran", reaped, live)
	}
	if treeCPU(-1) != 0 {
		t.Fatal("treeCPU of no process is not 0")
	}
}
