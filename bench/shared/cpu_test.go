package shared

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

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
