package main

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench/cpustat"
)

// cpuSample is the CPU time used so far by this process, the coordinator
// process, the PostgreSQL server and the whole machine, so a run can say
// where its CPU went (see bench/shared/cpu_test.go).
type cpuSample struct {
	self, coord, pg, machine time.Duration
	wall                     time.Time
}

func sampleCPU(postmaster string, coord *coordProc) cpuSample {
	s := cpuSample{self: cpustat.Self(), pg: postgresCPU(postmaster), machine: cpustat.Machine(), wall: time.Now()}
	if coord != nil {
		s.coord = coord.cpu()
	}
	return s
}

// cpuUse is what one run of n operations used per operation: the load
// generator's CPU, the coordinator's, PostgreSQL's and the rest of the
// machine's, and the cores busy.
type cpuUse struct {
	clientUS, coordUS, pgUS, restUS, busyCores float64
}

// to is the use from a to b of n operations whose load generator used
// client and whose coordinator used coord (pgbench: the client is the
// pgbench process, there is no coordinator).
func (a cpuSample) to(b cpuSample, n float64, client, coord time.Duration) cpuUse {
	if n <= 0 {
		return cpuUse{}
	}
	pg := b.pg - a.pg
	total := b.machine - a.machine
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	return cpuUse{
		clientUS:  us(client),
		coordUS:   us(coord),
		pgUS:      us(pg),
		restUS:    us(total - client - coord - pg),
		busyCores: float64(total) / float64(b.wall.Sub(a.wall)),
	}
}

// procStat returns the fields of /proc/PID/stat after the command name
// (field 3, the state, is [0]), nil if the process is gone.
func procStat(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func ticks(f []string, i int) time.Duration {
	if len(f) <= i {
		return 0
	}
	n, _ := strconv.ParseInt(f[i], 10, 64)
	return time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
}

// procCPU is the user and system CPU time of process pid, with that of its
// waited-for children if children is set.
func procCPU(pid string, children bool) time.Duration {
	f := procStat(pid) // utime [11], stime [12], cutime [13], cstime [14]
	d := ticks(f, 11) + ticks(f, 12)
	if children {
		d += ticks(f, 13) + ticks(f, 14)
	}
	return d
}

// postgresCPU is the CPU time used so far by the PostgreSQL server whose
// postmaster is pid: the postmaster, its live processes (backends,
// background workers) and those that exited (reaped by the postmaster, so
// in its children's times). Backends of runs that ended are counted there.
func postgresCPU(pid string) time.Duration {
	if pid == "" {
		return 0
	}
	d := procCPU(pid, true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		if f := procStat(name); len(f) > 1 && f[1] == pid {
			d += ticks(f, 11) + ticks(f, 12)
		}
	}
	return d
}
