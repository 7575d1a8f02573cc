package shared

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// cpuSample is the CPU time used so far by this process and by the whole
// machine (every process: PostgreSQL, pgbench, other users), so a phase of
// a benchmark can say where its CPU went.
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

// cpuUse is what one phase of n operations used: this process's CPU per
// operation, the rest of the machine's per operation, and how busy the
// machine's cores were (of runtime.NumCPU).
type cpuUse struct {
	selfUS, otherUS, busyCores float64
}

func (a cpuSample) to(b cpuSample, n int) cpuUse {
	self := b.self - a.self
	other := b.machine - a.machine - self
	return cpuUse{
		selfUS:    float64(self.Microseconds()) / float64(n),
		otherUS:   float64(other.Microseconds()) / float64(n),
		busyCores: float64(b.machine-a.machine) / float64(b.wall.Sub(a.wall)),
	}
}

// profilePhase writes a CPU profile of one phase of a benchmark to
// FENCEGATE_BENCH_CPUPROFILE-name.out if that variable is set (go test
// -cpuprofile covers setup and pgbench too). It returns the stop function.
func profilePhase(b *testing.B, name string) func() {
	base := os.Getenv("FENCEGATE_BENCH_CPUPROFILE")
	if base == "" {
		return func() {}
	}
	f, err := os.Create(base + "-" + name + ".out")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// openFence admits every write without any I/O: the gateway's own cost
// (HTTP in, proxy to the upstream, HTTP out) with no fence decision, the
// ceiling of any fence on this machine with this load generator.
type openFence struct{}

type openPermit struct{}

func (openPermit) Release() {}

func (openFence) Admit(context.Context, gateway.Write) (gateway.Permit, error) {
	return openPermit{}, nil
}

func (openFence) State(context.Context, string) (fencegate.FenceState, error) {
	return fencegate.FenceState{}, nil
}

func (openFence) Advance(context.Context, string, int64, string) (fencegate.FenceState, error) {
	return fencegate.FenceState{}, nil
}
