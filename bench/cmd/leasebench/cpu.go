package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is the CPU time used so far by this process and by the whole
// machine, so a run can say where its CPU went (see bench/shared/cpu_test.go).
type cpuSample struct {
	self, machine time.Duration
	wall          time.Time
}

func sampleCPU() cpuSample {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	return cpuSample{self: self, machine: machine, wall: time.Now()}
}

// cpuUse is what one run of n operations used per operation: this
// process's CPU and the rest of the machine's, and the cores busy.
type cpuUse struct {
	selfUS, otherUS, busyCores float64
}

func (a cpuSample) to(b cpuSample, n float64) cpuUse {
	if n <= 0 {
		return cpuUse{}
	}
	self := b.self - a.self
	other := b.machine - a.machine - self
	return cpuUse{
		selfUS:    float64(self.Microseconds()) / n,
		otherUS:   float64(other.Microseconds()) / n,
		busyCores: float64(b.machine-a.machine) / float64(b.wall.Sub(a.wall)),
	}
}
