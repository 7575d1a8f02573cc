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
// backend over pgx (what the coordinator adds to the SQL in Go); and the
// whole coordinator over its HTTP API (service, JSON, loopback HTTP, the Go
// client). The ratio is each runner's throughput over pgbench's.
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
	"net"
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
	"github.com/fencegate/fencegate/coordinator"
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
	flag.Parse()
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
	if err := run(*dbURL, *clients, *duration, *pgbench, *rounds); err != nil {
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
}

func run(adminURL string, clients int, d time.Duration, pgbench string, rounds int) error {
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

	// The coordinator over HTTP on loopback.
	svc := &coordinator.Service{Backend: leases, MaxTTL: 2 * ttl}
	svc.Start()
	defer svc.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	hc := &client.Client{URL: "http://" + ln.Addr().String(), Owner: owner, HTTPClient: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxIdleConns: clients},
	}}

	acquireRelease := map[string]func(ctx context.Context, c int) error{
		"go/pgx": func(ctx context.Context, c int) error {
			l, _, err := leases.Acquire(ctx, strconv.Itoa(c), owner, ttl)
			if err != nil {
				return err
			}
			_, err = leases.Release(ctx, l.Resource, owner, l.Token)
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
	}

	dir, err := os.MkdirTemp("", "leasebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scripts := map[string]string{
		"acquire+release": `\set res :client_id
` + pgbenchSQL(postgres.AcquireSQL, ":res", ":owner", ":ttl") + ` \gset
` + pgbenchSQL(postgres.ReleaseSQL, ":res", ":owner", ":token") + ";\n" +
			pgbenchSQL(postgres.NotifySQL, ":res") + ";\n",
		"renew": `\set res :client_id + ` + strconv.Itoa(renewFirst) + `
\set tok :base + :client_id
` + pgbenchSQL(postgres.RenewSQL, ":res", ":owner", ":tok", ":ttl") + ";\n",
	}

	// Runners alternate within each round, so that drift (other load on
	// the machine, the table growing) hits all of them alike; each
	// runner's median round by throughput is reported.
	var results []result
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
			c0 := sampleCPU()
			r, err := runPgbench(pgbench, dbURL, path, clients, d, base)
			r.cpu = c0.to(sampleCPU(), r.ops*d.Seconds())
			if err != nil {
				return err
			}
			byRunner["pgbench"] = append(byRunner["pgbench"], r)
			for _, runner := range []string{"go/pgx", "http"} {
				c0 := sampleCPU()
				r, err := runGo(w.ops[runner], clients, d)
				r.cpu = c0.to(sampleCPU(), r.ops*(d+time.Second).Seconds())
				if err != nil {
					return fmt.Errorf("%s %s: %w", w.name, runner, err)
				}
				r.runner = runner
				byRunner[runner] = append(byRunner[runner], r)
			}
		}
		for _, runner := range []string{"pgbench", "go/pgx", "http"} {
			rs := byRunner[runner]
			slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.ops, b.ops) })
			m := rs[len(rs)/2]
			m.workload = w.name
			results = append(results, m)
		}
	}

	fmt.Printf("PostgreSQL lease coordinator vs pgbench, same SQL, same database, %d clients, %v per run, median of %d rounds\n", clients, d, rounds)
	fmt.Printf("go_us/op: CPU of this process (pgbench: none); rest_us/op: the rest of the machine (PostgreSQL, pgbench, other load); busy: cores in use of %d\n\n", runtime.NumCPU())
	fmt.Printf("%-16s %-8s %10s %9s %9s %9s %8s %9s %9s %6s\n", "workload", "runner", "ops/s", "mean", "p50", "p99", "ratio", "go_us/op", "rest_us/op", "busy")
	var pg float64
	for _, r := range results {
		if r.runner == "pgbench" {
			pg = r.ops
		}
		p50, p99 := "-", "-"
		if r.p50 > 0 {
			p50, p99 = ms(r.p50), ms(r.p99)
		}
		fmt.Printf("%-16s %-8s %10.0f %9s %9s %9s %7.0f%% %9.0f %9.0f %6.2f\n", r.workload, r.runner, r.ops, ms(r.mean), p50, p99, 100*r.ops/pg, r.cpu.selfUS, r.cpu.otherUS, r.cpu.busyCores)
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
	return result{runner: "pgbench", ops: ops, mean: time.Duration(mean * float64(time.Millisecond))}, nil
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
