// Package crash measures what a crash of a gateway on a local fence costs
// the writes that follow it (issue 42's figure), against a clean restart
// side by side in one run. bench/crash.sh runs it; docs/performance.md has
// the figures.
package crash

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/bench/internal/promtext"
	"github.com/fencegate/fencegate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// routeTimeout is the orders route's upstream timeout: a busy crash holds
// an advance for routeTimeout + 1 s (the drain margin) after the restart.
// The uploads route's 30 s, never written to, is there to show that the
// bound is the written route's own, not the longest.
const routeTimeout = 3 * time.Second

// slowFor is how long the upstream holds a write marked X-Slow: the write
// in flight at a busy kill, below the route's timeout.
const slowFor = 2500 * time.Millisecond

// writes is the number of first writes measured after each restart (half
// to new resources, half repeating a fence's token), followed by writes/2
// advances. CRASHBENCH_WRITES overrides it.
func writes() int {
	if n, err := strconv.Atoi(os.Getenv("CRASHBENCH_WRITES")); err == nil && n >= 2 {
		return n &^ 1
	}
	return 100
}

// store is one local-fence store: the config section, fresh per call (a
// restart must meet only its own predecessor's serving record).
type store struct {
	name    string
	section func(b *testing.B, dir string) string
}

var stores = []store{
	{"embedded", func(b *testing.B, dir string) string {
		return fmt.Sprintf("store:\n  embedded: {path: %s/fencegate.db}\n", dir)
	}},
	{"postgres-local", func(b *testing.B, dir string) string {
		return fmt.Sprintf("store:\n  postgres: {url: %q}\nfence: {mode: local}\n", testenv.Postgres(b).URL)
	}},
}

// scenario is how the gateway goes down before the measured restart.
type scenario struct {
	name string
	down func(b *testing.B, g *gatewayProc, slow string)
}

var scenarios = []scenario{
	// The baseline: SIGTERM, the server waits for its writes and records
	// that it stopped.
	{"clean", func(b *testing.B, g *gatewayProc, _ string) { g.stop(b) }},
	// kill -9 with nothing in flight for the last second (the fence
	// records quiescence after 500 ms).
	{"quiet", func(b *testing.B, g *gatewayProc, _ string) { g.kill9() }},
	// kill -9 with a write in flight: held by the upstream, on its way.
	{"busy", func(b *testing.B, g *gatewayProc, slow string) {
		done := make(chan error, 1)
		go func() {
			_, err := g.put(slow, "1", "slow", true)
			done <- err
		}()
		if err := g.upstream.waitSlow(10 * time.Second); err != nil {
			b.Fatalf("busy: %v", err)
		}
		g.kill9()
		<-done // the kill cut it
	}},
}

// result is one scenario's figures in one round.
type result struct {
	first, advance []time.Duration // the first writes (new and same token), then the advances
	listen         time.Duration   // from the start of the new process until it accepted
	firstAdvance   time.Duration   // the first advance's answer, from the new process's start
	waits          float64         // fencegate_recovery_wait_seconds_count after the run (-1: none)
}

// BenchmarkCrashRecovery measures, per store, the first writes after a
// restart of a gateway process in three ways, side by side in each round
// (the order rotates per round, each on a fresh store):
//
//   - clean: SIGTERM and start (the baseline);
//   - quiet: kill -9 with nothing in flight for the last second;
//   - busy: kill -9 with a write in flight (held by the upstream).
//
// Before going down, the gateway writes token 1 to writes/2 "same" and
// writes/2 "adv" resources. After the restart, one writer sends the first
// writes (alternately a new resource with token 1 and a "same" resource
// with token 1 again: never at risk after any crash), then the advances
// (token 2 on the "adv" resources: at risk after a busy crash only, where
// the first waits until the route's timeout + 1 s after the start and the
// rest find the window over).
//
//	bench/crash.sh   # or:
//	go test ./bench/crash -run '^$' -bench 'CrashRecovery/embedded' -benchtime 3x
//
// Figures: medians over the rounds of each round's p50/p99/max in ms (the
// max, because one write in 100 waiting is past a nearest-rank p99), and of
// each round's ratio to the clean restart of the same round ("x-clean").
// "first-advance-s" is when the first advance was answered, counted from
// the new process's start (busy: the route's timeout + 1 s); "1st-write"
// the very first write's latency (a new resource: a durable advance, and
// the quiet fence's busy record); "waits" the
// writes that waited for a recovery (the gateway's
// fencegate_recovery_wait_seconds_count): 0 after a clean or quiet
// restart, 1 after a busy one; "listen-ms" how long the new process took
// to accept connections.
func BenchmarkCrashRecovery(b *testing.B) {
	bin := os.Getenv("FENCEGATE") // another build, for before/after figures
	if bin == "" {
		bin = testenv.BuildBinary(b, "./cmd/fencegate")
	}
	up := newUpstream(b)
	n := writes()
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			res := map[string][]result{}
			for round := 0; b.Loop(); round++ {
				for k := range scenarios {
					sc := scenarios[(k+round)%len(scenarios)]
					r := runScenario(b, bin, up, st, sc, n, fmt.Sprintf("/orders/r%d-%s/", round, sc.name))
					res[sc.name] = append(res[sc.name], r)
					b.Logf("round %d %-5s first %d: 1st %6.2f ms p50 %6.2f ms p99 %6.2f ms max %6.2f ms | %d advances: p50 %7.2f ms p99 %7.2f ms max %7.2f ms, first answered %5.2f s after the start | listening after %3.0f ms | waits %v",
						round+1, sc.name, n, ms(r.first[0]), ms(pct(r.first, 50)), ms(pct(r.first, 99)), ms(pct(r.first, 100)), n/2, ms(pct(r.advance, 50)), ms(pct(r.advance, 99)), ms(pct(r.advance, 100)),
						r.firstAdvance.Seconds(), ms(r.listen), r.waits)
				}
			}
			report(b, n, res)
		})
	}
}

// report prints and reports the medians over the rounds, and fails on a
// wait where none may be (a stall: counted, or a write as slow as the
// route's timeout) or none where one must be (then the busy kill found
// nothing in flight and measured nothing).
func report(b *testing.B, n int, res map[string][]result) {
	clean := res["clean"]
	// med is the median over the rounds of f of a round's result and the
	// clean restart's of the same round.
	med := func(rs []result, f func(r, c result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r, clean[i])
		}
		return median(xs)
	}
	kinds := []struct {
		name string
		of   func(result) []time.Duration
	}{{"first", func(r result) []time.Duration { return r.first }}, {"advance", func(r result) []time.Duration { return r.advance }}}
	b.Logf("medians of %d rounds, (x) the ratio to the clean restart of the same round:", len(clean))
	b.Logf("%-5s | first %d writes: p50 ms      p99 ms          max ms | %d advances: p50 ms       p99 ms          max ms | 1st advance s | waits | listening ms", "", n, n/2)
	for _, sc := range scenarios {
		rs := res[sc.name]
		var cells []string
		for _, k := range kinds {
			for _, p := range []int{50, 99, 100} {
				of := func(r result) float64 { return ms(pct(k.of(r), p)) }
				abs := med(rs, func(r, _ result) float64 { return of(r) })
				rel := med(rs, func(r, c result) float64 { return of(r) / of(c) })
				unit := fmt.Sprintf("%s-%s-p%d", sc.name, k.name, p)
				if p == 100 {
					unit = sc.name + "-" + k.name + "-max"
				}
				b.ReportMetric(abs, unit+"-ms")
				if sc.name != "clean" {
					b.ReportMetric(rel, unit+"-x-clean")
				}
				cells = append(cells, fmt.Sprintf("%8.2f (%5.2fx)", abs, rel))
			}
		}
		waits := -1.0 // the most of a round; -1: not counted by this build
		for _, r := range rs {
			waits = max(waits, r.waits)
		}
		adv := med(rs, func(r, _ result) float64 { return r.firstAdvance.Seconds() })
		listen := med(rs, func(r, _ result) float64 { return ms(r.listen) })
		b.ReportMetric(med(rs, func(r, _ result) float64 { return ms(r.first[0]) }), sc.name+"-1st-write-ms")
		b.ReportMetric(waits, sc.name+"-waits")
		b.ReportMetric(adv, sc.name+"-first-advance-s")
		b.ReportMetric(listen, sc.name+"-listen-ms")
		b.Logf("%-5s | %s | %s | %13.2f | %5.0f | %12.0f", sc.name, strings.Join(cells[:3], " "), strings.Join(cells[3:], " "), adv, waits, listen)
		for i, r := range rs {
			// A stall on a build that does not count its waits: no write
			// after a clean or quiet restart may take the route's timeout.
			if slowest := slices.Max(append(slices.Clone(r.first), r.advance...)); sc.name != "busy" && slowest >= routeTimeout {
				b.Errorf("round %d %s: a write took %v after the restart; want none near the route's timeout (%v)", i+1, sc.name, slowest.Round(time.Millisecond), routeTimeout)
			}
			if want := sc.name == "busy"; r.waits >= 0 && (r.waits > 0) != want {
				b.Errorf("round %d %s: %v writes waited for a recovery; want %s", i+1, sc.name, r.waits, map[bool]string{true: "the first advance", false: "none"}[want])
			}
		}
	}
	b.ReportMetric(0, "ns/op") // a round of every scenario: meaningless beside the figures
}

// runScenario starts a gateway on a fresh store, writes the fences, takes
// it down the scenario's way, restarts it and measures.
func runScenario(b *testing.B, bin string, up *upstream, st store, sc scenario, n int, prefix string) result {
	dir := b.TempDir()
	g := startGateway(b, bin, up, dir, st.section(b, dir))
	defer g.kill9()
	for i := range n / 2 {
		for _, k := range []string{"same", "adv"} {
			g.mustPut(b, fmt.Sprintf("%s%s-%d", prefix, k, i), "1")
		}
	}
	// Quiescence is recorded 500 ms after the last write ends: the same
	// pause before every way down.
	time.Sleep(time.Second)
	sc.down(b, g, prefix+"inflight")
	var r result
	r.listen = g.start(b)
	for i := range n / 2 {
		r.first = append(r.first, g.mustPut(b, fmt.Sprintf("%snew-%d", prefix, i), "1"))
		r.first = append(r.first, g.mustPut(b, fmt.Sprintf("%ssame-%d", prefix, i), "1"))
	}
	for i := range n / 2 {
		r.advance = append(r.advance, g.mustPut(b, fmt.Sprintf("%sadv-%d", prefix, i), "2"))
		if i == 0 {
			r.firstAdvance = time.Since(g.started)
		}
	}
	r.waits = g.metric(b, "fencegate_recovery_wait_seconds_count")
	return r
}

// gatewayProc is one `fencegate serve` process at a time on one config.
type gatewayProc struct {
	bin, cfg, gw, admin string
	upstream            *upstream
	cmd                 *exec.Cmd
	exited              chan struct{}
	log                 *testenv.LogBuffer
	client              *http.Client
	started             time.Time
}

func startGateway(b *testing.B, bin string, up *upstream, dir, storeSection string) *gatewayProc {
	g := &gatewayProc{
		bin: bin, upstream: up,
		gw:    fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b)),
		admin: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b)),
		cfg:   filepath.Join(dir, "fencegate.yaml"),
	}
	yaml := fmt.Sprintf(`
gateway:
  listen: %s
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: %s}
      resource: "{path}"
    - name: uploads
      match: {path_prefix: /uploads/}
      upstream: {url: %q, timeout: 30s}
      resource: "{path}"
admin: {listen: %s}
log: {level: warn}
`, g.gw, up.URL, routeTimeout, up.URL, g.admin) + storeSection
	if err := os.WriteFile(g.cfg, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	g.start(b)
	return g
}

// start runs the process and returns how long it took to accept
// connections on the gateway listener.
func (g *gatewayProc) start(b *testing.B) time.Duration {
	g.log = &testenv.LogBuffer{}
	g.cmd = exec.Command(g.bin, "serve", "-c", g.cfg)
	g.cmd.Stdout, g.cmd.Stderr = g.log, g.log
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A new process: no connection of the old one's may be reused.
	g.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	g.started = time.Now()
	if err := testenv.StartDying(g.cmd); err != nil {
		b.Fatal(err)
	}
	g.exited = make(chan struct{})
	go func(cmd *exec.Cmd, ch chan struct{}) { cmd.Wait(); close(ch) }(g.cmd, g.exited)
	for deadline := g.started.Add(20 * time.Second); ; {
		if conn, err := net.DialTimeout("tcp", g.gw, time.Second); err == nil {
			conn.Close()
			return time.Since(g.started)
		}
		select {
		case <-g.exited:
			b.Fatalf("fencegate exited before listening:\n%s", g.log.Tail(40))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("fencegate not listening after 20s:\n%s", g.log.Tail(40))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (g *gatewayProc) stop(b *testing.B) {
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(40 * time.Second):
		b.Fatalf("fencegate did not exit after SIGTERM:\n%s", g.log.Tail(40))
	}
	if !g.cmd.ProcessState.Success() {
		b.Fatalf("fencegate exited with %v after SIGTERM:\n%s", g.cmd.ProcessState, g.log.Tail(40))
	}
}

// kill9 kills the process without any chance to clean up.
func (g *gatewayProc) kill9() {
	g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.exited
}

// put writes body to path with token and returns how long the answer
// took, whole; slow asks the upstream to hold the write.
func (g *gatewayProc) put(path, token, body string, slow bool) (time.Duration, error) {
	req, err := http.NewRequest("PUT", "http://"+g.gw+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Fencing-Token", token)
	if slow {
		req.Header.Set("X-Slow", "1")
	}
	start := time.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, err
	}
	msg, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s: %s", resp.Status, msg)
	}
	return d, err
}

func (g *gatewayProc) mustPut(b *testing.B, path, token string) time.Duration {
	d, err := g.put(path, token, "x", false)
	if err != nil {
		b.Fatalf("PUT %s with token %s: %v\n%s", path, token, err, g.log.Tail(20))
	}
	return d
}

// metric is the value of the unlabelled series name on /metrics, -1
// when there is none.
func (g *gatewayProc) metric(b *testing.B, name string) float64 {
	p, err := promtext.Get(context.Background(), g.client, "http://"+g.admin+"/metrics")
	if err != nil {
		b.Fatal(err)
	}
	if v, ok := p.Sum(name); ok {
		return v
	}
	return -1 // a build without it
}

// upstream answers 200 at once, or after slowFor for a write marked
// X-Slow, telling waitSlow when one arrived.
type upstream struct {
	*httptest.Server
	slow chan struct{}
}

func newUpstream(b *testing.B) *upstream {
	u := &upstream{slow: make(chan struct{}, 4)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Slow") != "" {
			u.slow <- struct{}{}
			time.Sleep(slowFor)
		}
	}))
	b.Cleanup(u.Close)
	return u
}

func (u *upstream) waitSlow(d time.Duration) error {
	select {
	case <-u.slow:
		return nil
	case <-time.After(d):
		return fmt.Errorf("the slow write did not reach the upstream in %v", d)
	}
}

// pct is the p-th percentile of ds (nearest rank; 100 the max), 0 for
// none.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[max(0, (len(s)*p+99)/100-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
