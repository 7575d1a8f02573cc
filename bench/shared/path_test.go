package shared

import (
	"os"
	"time"
)

// The write pattern of the shared benchmarks, on PostgreSQL and on etcd
// alike: which resource each write goes to, and the warm-up before a
// shared phase.

// strided was the benchmarks' path over n resources: client c's i-th
// write. With n = 1,000 its writes to one resource come in bursts:
// c·7919 + i·104729 (mod 1,000) is the same resource for the clients c,
// c+9, c+18... a step apart, and for c+1 111 steps later, so a resource
// got about 7 writes in a row and then none for about 104 steps of every
// client (2 s at 3,000 writes/s). Every burst found its marker idled out
// (both stores let an idle marker go after 1 s): one marker taken again
// in 7 writes, an artifact of the pattern (at 0.3 s between writes of a
// resource, spread at random, about one gap in 30 exceeds the idle time).
func strided(c, i, n int) int { return (c*7919 + i*104729) % n }

// scattered is client c's i-th resource of n, spread at random (a fixed
// pseudo-random function of c and i: splitmix64).
func scattered(c, i, n int) int {
	x := uint64(c)<<32 | uint64(i)
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(n))
}

// envOn is whether any of names is set to 1.
func envOn(names ...string) bool {
	for _, n := range names {
		if os.Getenv(n) == "1" {
			return true
		}
	}
	return false
}

// writePath is the path of the shared benchmarks over n resources:
// scattered, or strided with FENCEGATE_BENCH_STRIDE=1 (or the etcd
// benchmark's older FENCEGATE_BENCH_ETCD_STRIDE=1), to compare. A
// benchmark sends each resource through one replica (by its parity, as
// the old (c+i)%2 did with strided).
func writePath(n int) func(c, i int) int {
	if envOn("FENCEGATE_BENCH_STRIDE", "FENCEGATE_BENCH_ETCD_STRIDE") {
		return func(c, i int) int { return strided(c, i, n) }
	}
	return func(c, i int) int { return scattered(c, i, n) }
}

// warmUp makes the phase's writes for 2 s, unmeasured, just before a
// shared phase, so that it starts with the markers a running workload
// holds: otherwise it counts as its own the markers of its cold start
// (idle markers go after 1 s, and the local phase before took 5 s), on
// etcd most of the raft proposals of a 5 s phase.
// FENCEGATE_BENCH_COLD=1 (or FENCEGATE_BENCH_ETCD_COLD=1): no warm-up.
func warmUp(clients int, url, token func(c, i int) string) {
	if !envOn("FENCEGATE_BENCH_COLD", "FENCEGATE_BENCH_ETCD_COLD") {
		driveLabeled(clients, 2*time.Second, url, token)
	}
}
