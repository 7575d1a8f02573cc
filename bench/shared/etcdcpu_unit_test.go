package shared

import (
	"os"
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
	long := func(path func(c, i int) int) float64 {
		last := make(map[int]int)
		n, gaps := 0, 0
		for i := range 300 {
			for c := range 64 {
				r := path(c, i)
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
