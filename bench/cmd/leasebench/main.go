// Command leasebench measures the lease coordinator on PostgreSQL beside
// pgbench running the same SQL on the same database in the same run.
//
// Workloads, each run by -clients concurrent clients for -duration, every
// client on its own resource (the limit is the database, not contention):
//
//	acquire+release  one acquisition and its release per op
//	renew            one renewal of a held lease per op
//
// Runners: pgbench with the statements of adapters/postgres (AcquireSQL,
// ReleaseSQL, RenewSQL) and -M prepared; the coordinator's PostgreSQL
// backend over pgx in this process (what the coordinator adds to the SQL in
// Go); and the whole coordinator over its HTTP API, run as its own process
// (this binary with -serve: the code of `fencegate serve`, coordinator only,
// pool of -clients connections), called by two load generators: the Go
// client (coordinator/client, runner http) and a lean one (runner
// http/raw, see rawClient), the counterpart of pgbench's C client. The
// ratio is each runner's throughput over pgbench's.
//
// Where the CPU goes is measured per process for every run: the load
// generator (pgbench, or this process), the coordinator process, the
// PostgreSQL server (postmaster and its backends) and the rest of the
// machine; on 2 cores all of them share the cores, so throughput is about
// cores / total CPU per op. The column "cpu%" is pgbench's CPU per op
// (client + pg) over the runner's (client + coord + pg): the ratio the runner
// would reach on a machine where they are CPU-bound and alone, whatever the
// other load on this one (which the "rest" column shows).
//
// It creates a database of its own on the server of -url and drops it at the
// end. bench/coordinator.sh runs it against a throwaway cluster.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/adapters/postgres"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/jackc/pgx/v5"
)

const (
	owner      = "bench"
	ttl        = time.Hour
	renewFirst = 1000 // renew resources are "1000", "1001", ...
)

func main() {
	dbURL := flag.String("url", os.Getenv("DATABASE_URL"), "PostgreSQL server `URL` (env DATABASE_URL); a database is created on it")
	clients := flag.Int("clients", 16, "concurrent clients (pgbench -c, goroutines, pool connections)")
	duration := flag.Duration("duration", 10*time.Second, "length of each run")
	pgbench := flag.String("pgbench", "pgbench", "pgbench `binary`")
	rounds := flag.Int("rounds", 3, "rounds; runners alternate within a round and the median round is reported")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to `file`")
	mode := flag.String("mode", "shared", "fence.mode of the coordinator process: shared (fence on issuance in the acquire statement) or local (a separate advance transaction)")
	coordProfile := flag.String("coordprofile", "", "write a CPU profile of the coordinator process to `file`")
	serve := flag.String("serve", "", "internal: run the coordinator process on the configuration `file`")
	flag.Parse()
	if *serve != "" {
		if err := serveMain(*serve, *cpuprofile); err != nil {
			fmt.Fprintln(os.Stderr, "leasebench -serve:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "leasebench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*dbURL, *clients, *duration, *pgbench, *rounds, *mode, *coordProfile); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "leasebench:", err)
		os.Exit(1)
	}
}

type result struct {
	workload, runner string
	ops              float64 // per second
	mean, p50, p99   time.Duration
	cpu              cpuUse
	clientCPU        time.Duration // pgbench's own CPU
}

func run(adminURL string, clients int, d time.Duration, pgbench string, rounds int, mode, coordProfile string) error {
	if mode != "shared" && mode != "local" {
		return fmt.Errorf("-mode %q: want shared or local", mode)
	}
	if adminURL == "" {
		return errors.New("give -url or DATABASE_URL")
	}
	ctx := context.Background()
	dbURL, drop, err := createDB(ctx, adminURL)
	if err != nil {
		return err
	}
	defer drop()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: int32(clients)})
	if err != nil {
		return err
	}
	defer st.Close()
	leases := postgres.NewLeases(st)
	leases.RaiseFence = mode == "shared"
	// acquire is the backend's acquisition with fence on issuance as the
	// coordinator process does it in mode: in the statement (shared), or
	// the fence's advance as a transaction of its own after it (local:
	// the coordinator's OnIssue through the local fence).
	acquire := func(ctx context.Context, resource string) (int64, error) {
		l, fresh, err := leases.Acquire(ctx, resource, owner, ttl)
		if err == nil && fresh && mode == "local" {
			_, err = st.AdvanceFence(ctx, resource, l.Token, owner)
		}
		return l.Token, err
	}

	// The renew workload's leases, taken one after another on new
	// resources, so their tokens are consecutive: pgbench computes each
	// client's token as base + client_id.
	var base int64
	for c := range clients {
		l, _, err := leases.Acquire(ctx, strconv.Itoa(renewFirst+c), owner, ttl)
		if err != nil {
			return err
		}
		if c == 0 {
			base = l.Token
		} else if l.Token != base+int64(c) {
			return fmt.Errorf("setup: renew tokens are not consecutive (%d after %d)", l.Token, base)
		}
	}

	// The postmaster, whose processes are PostgreSQL's CPU.
	var backend int
	if err := st.Pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return err
	}
	postmaster := ""
	if f := procStat(strconv.Itoa(backend)); len(f) > 1 {
		postmaster = f[1]
	}

	dir, err := os.MkdirTemp("", "leasebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The coordinator over HTTP on loopback, in a process of its own.
	coord, err := startCoordinator(dir, dbURL, clients, mode, coordProfile)
	if err != nil {
		return err
	}
	defer coord.stop()
	hc := &client.Client{URL: "http://" + coord.addr, Owner: owner, HTTPClient: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxIdleConns: clients},
	}}
	// The lean clients connect at the start of each run, as pgbench does
	// (the coordinator closes idle connections).
	raws := make([]*rawClient, clients)
	redial := func() error {
		for c := range raws {
			if raws[c] != nil {
				raws[c].close()
			}
			var err error
			if raws[c], err = dialRaw(coord.addr); err != nil {
				return err
			}
		}
		return nil
	}
	defer func() {
		for _, r := range raws {
			if r != nil {
				r.close()
			}
		}
	}()
	ttlJSON := ttl.String()

	acquireRelease := map[string]func(ctx context.Context, c int) error{
		"go/pgx": func(ctx context.Context, c int) error {
			tok, err := acquire(ctx, strconv.Itoa(c))
			if err != nil {
				return err
			}
			_, err = leases.Release(ctx, strconv.Itoa(c), owner, tok)
			return err
		},
		"http": func(ctx context.Context, c int) error {
			l, err := hc.AcquireOnce(ctx, strconv.Itoa(c), client.Options{TTL: ttl})
			if err != nil {
				return err
			}
			_, err = hc.Release(ctx, l.Resource, l.Token)
			return err
		},
		"http/raw": func(ctx context.Context, c int) error {
			return raws[c].acquireRelease(strconv.Itoa(c), owner, ttlJSON)
		},
	}
	renew := map[string]func(ctx context.Context, c int) error{
		"go/pgx": func(ctx context.Context, c int) error {
			_, err := leases.Renew(ctx, strconv.Itoa(renewFirst+c), owner, base+int64(c), ttl)
			return err
		},
		"http": func(ctx context.Context, c int) error {
			_, err := hc.Renew(ctx, strconv.Itoa(renewFirst+c), base+int64(c), ttl)
			return err
		},
		"http/raw": func(ctx context.Context, c int) error {
			return raws[c].renew(strconv.Itoa(renewFirst+c), owner, base+int64(c), ttlJSON)
		},
	}

	acquireScript := pgbenchSQL(postgres.AcquireRaiseSQL, ":res", ":owner", ":ttl") + " \\gset\n"
	if mode == "local" {
		acquireScript = pgbenchSQL(postgres.AcquireSQL, ":res", ":owner", ":ttl") + " \\gset\n" +
			"BEGIN;\n" + postgres.DurableSQL + ";\n" + pgbenchSQL(postgres.AdvanceSQL, ":res", ":token", ":owner") + ";\nCOMMIT;\n"
	}
	scripts := map[string]string{
		"acquire+release": "\\set res :client_id\n" + acquireScript + pgbenchSQL(postgres.ReleaseSQL, ":res", ":owner", ":token") + ";\n" +
			pgbenchSQL(postgres.NotifySQL, ":res") + ";\n",
		"renew": `\set res :client_id + ` + strconv.Itoa(renewFirst) + `
\set tok :base + :client_id
` + pgbenchSQL(postgres.RenewSQL, ":res", ":owner", ":tok", ":ttl") + ";\n",
	}

	// Runners alternate within each round, so that drift (other load on
	// the machine, the table growing) hits all of them alike; each
	// runner's median round by throughput is reported.
	var results []result
	goRunners := []string{"go/pgx", "http", "http/raw"}
	for _, w := range []struct {
		name string
		ops  map[string]func(context.Context, int) error
	}{{"acquire+release", acquireRelease}, {"renew", renew}} {
		path := filepath.Join(dir, strings.ReplaceAll(w.name, "+", "_")+".sql")
		if err := os.WriteFile(path, []byte(scripts[w.name]), 0o644); err != nil {
			return err
		}
		byRunner := map[string][]result{}
		for range rounds {
			c0 := sampleCPU(postmaster, coord)
			r, err := runPgbench(pgbench, dbURL, path, clients, d, base)
			if err != nil {
				return err
			}
			r.cpu = c0.to(sampleCPU(postmaster, coord), r.ops*d.Seconds(), r.clientCPU, 0)
			byRunner["pgbench"] = append(byRunner["pgbench"], r)
			for _, runner := range goRunners {
				if runner == "http/raw" {
					if err := redial(); err != nil {
						return err
					}
				}
				c0 := sampleCPU(postmaster, coord)
				r, err := runGo(w.ops[runner], clients, d)
				if err != nil {
					return fmt.Errorf("%s %s: %w", w.name, runner, err)
				}
				c1 := sampleCPU(postmaster, coord)
				n := r.ops * (d + time.Second).Seconds()
				if runner == "go/pgx" { // the coordinator's code runs in this process
					r.cpu = c0.to(c1, n, 0, c1.self-c0.self)
				} else {
					r.cpu = c0.to(c1, n, c1.self-c0.self, c1.coord-c0.coord)
				}
				r.runner = runner
				byRunner[runner] = append(byRunner[runner], r)
			}
		}
		for _, runner := range append([]string{"pgbench"}, goRunners...) {
			rs := byRunner[runner]
			slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.ops, b.ops) })
			m := rs[len(rs)/2]
			m.workload = w.name
			results = append(results, m)
		}
	}

	fmt.Printf("PostgreSQL lease coordinator (fence.mode %s) vs pgbench, same SQL, same database, %d clients, %d connections, %v per run, median of %d rounds\n", mode, clients, clients, d, rounds)
	fmt.Printf("CPU µs per op: client = the load generator (pgbench; this process's Go or raw HTTP client), coord = the coordinator process (go/pgx: this process, client included),\n")
	fmt.Printf("pg = PostgreSQL (postmaster and backends), rest = the rest of the machine; busy: cores in use of %d;\n", runtime.NumCPU())
	fmt.Printf("cpu%% = pgbench's (client+pg) CPU per op over the runner's (client+coord+pg): the ratio without the rest of the machine's load\n\n")
	fmt.Printf("%-16s %-9s %9s %9s %9s %9s %7s %7s %7s %7s %7s %6s %6s\n", "workload", "runner", "ops/s", "mean", "p50", "p99", "ratio", "client", "coord", "pg", "rest", "busy", "cpu%")
	var pg, pgCPU float64
	for _, r := range results {
		own := r.cpu.clientUS + r.cpu.coordUS + r.cpu.pgUS
		if r.runner == "pgbench" {
			pg, pgCPU = r.ops, own
		}
		p50, p99 := "-", "-"
		if r.p50 > 0 {
			p50, p99 = ms(r.p50), ms(r.p99)
		}
		fmt.Printf("%-16s %-9s %9.0f %9s %9s %9s %6.0f%% %7.0f %7.0f %7.0f %7.0f %6.2f %5.0f%%\n", r.workload, r.runner, r.ops, ms(r.mean), p50, p99, 100*r.ops/pg,
			r.cpu.clientUS, r.cpu.coordUS, r.cpu.pgUS, r.cpu.restUS, r.cpu.busyCores, 100*pgCPU/own)
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// pgbenchSQL turns $1, $2, ... into pgbench variables.
func pgbenchSQL(sql string, vars ...string) string {
	for i := len(vars); i >= 1; i-- {
		sql = strings.ReplaceAll(sql, "$"+strconv.Itoa(i), vars[i-1])
	}
	return sql
}

var (
	tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latRe = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

func runPgbench(bin, dbURL, script string, clients int, d time.Duration, base int64) (result, error) {
	cmd := exec.Command(bin, "-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", "2",
		"-T", strconv.Itoa(int(d.Seconds())),
		"-D", "owner="+owner, "-D", "ttl="+strconv.FormatInt(ttl.Microseconds(), 10),
		"-D", "base="+strconv.FormatInt(base, 10), "-f", script, dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	tps, lat := tpsRe.FindSubmatch(out), latRe.FindSubmatch(out)
	if tps == nil || lat == nil || strings.Contains(string(out), "failed: ") && !strings.Contains(string(out), "failed: 0 ") {
		return result{}, fmt.Errorf("pgbench output not understood or transactions failed:\n%s", out)
	}
	ops, _ := strconv.ParseFloat(string(tps[1]), 64)
	mean, _ := strconv.ParseFloat(string(lat[1]), 64)
	return result{runner: "pgbench", ops: ops, mean: time.Duration(mean * float64(time.Millisecond)),
		clientCPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, nil
}

// runGo runs op from clients goroutines for d after a one-second warm-up.
func runGo(op func(context.Context, int) error, clients int, d time.Duration) (result, error) {
	ctx := context.Background()
	var (
		mu   sync.Mutex
		lats []time.Duration
		ferr error
		wg   sync.WaitGroup
	)
	warm := time.Now().Add(time.Second)
	end := warm.Add(d)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				start := time.Now()
				if start.After(end) {
					break
				}
				if err := op(ctx, c); err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
					return
				}
				if start.After(warm) {
					mine = append(mine, time.Since(start))
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ferr != nil {
		return result{}, ferr
	}
	if len(lats) == 0 {
		return result{}, errors.New("no operations completed")
	}
	slices.Sort(lats)
	var sum time.Duration
	for _, l := range lats {
		sum += l
	}
	return result{
		ops:  float64(len(lats)) / d.Seconds(),
		mean: sum / time.Duration(len(lats)),
		p50:  lats[len(lats)/2],
		p99:  lats[len(lats)*99/100],
	}, nil
}

// createDB creates a database of its own on the server of adminURL and
// returns its URL and a func dropping it.
func createDB(ctx context.Context, adminURL string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("leasebench_%d", os.Getpid())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		conn.Close(ctx)
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), func() {
		conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		conn.Close(ctx)
	}, nil
}
