// Package cpustat samples the CPU time of this process and of the whole
// machine (every process: PostgreSQL, pgbench, other users), so that a
// benchmark phase can say where its CPU went. Linux only (/proc/stat,
// USER_HZ = 100).
package cpustat

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sample is the CPU time used so far by this process and by the machine.
type Sample struct {
	self, machine time.Duration
	wall          time.Time
}

// Now takes a sample.
func Now() Sample {
	return Sample{self: Self(), machine: Machine(), wall: time.Now()}
}

// Self is the CPU time (user and system) this process used so far.
func Self() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Machine is the CPU time every process of the machine used so far (idle,
// iowait and guest time excluded); 0 where /proc/stat cannot be read.
func Machine() time.Duration {
	var machine time.Duration
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			if i == 3 || i == 4 || i >= 8 { // idle, iowait, guest
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			machine += time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
		}
	}
	return machine
}

// Use is what one phase of n operations used: this process's CPU per
// operation (µs), the rest of the machine's per operation, and how many
// of the machine's cores were busy on average.
type Use struct {
	SelfUS, OtherUS, BusyCores float64
}

// To is the use from a to b over n operations (zero for n <= 0).
func (a Sample) To(b Sample, n float64) Use {
	if n <= 0 {
		return Use{}
	}
	self := b.self - a.self
	other := b.machine - a.machine - self
	return Use{
		SelfUS:    float64(self.Microseconds()) / n,
		OtherUS:   float64(other.Microseconds()) / n,
		BusyCores: float64(b.machine-a.machine) / float64(b.wall.Sub(a.wall)),
	}
}
