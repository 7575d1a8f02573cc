package e2e

// `fencegate lease run` with real processes: the built binary wraps the
// job e2e/testdata/leasejob, which writes through a real gateway in front
// of the recording upstream.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/fencegate/fencegate/internal/recorder"
	"github.com/fencegate/fencegate/internal/testenv"
)

// leaseRunYAML is a gateway and a coordinator on one embedded store (so a
// newly issued token raises the fence at once).
func leaseRunYAML(upstream string) string {
	return fmt.Sprintf(`
gateway:
  listen: $GATEWAY
  routes:
    - name: orders
      match: {path_prefix: /orders/}
      upstream: {url: %q, timeout: 10s}
      resource: "{path}"
store:
  embedded: {path: $DIR/fencegate.db}
coordinator: {enabled: true, listen: $COORDINATOR}
admin: {listen: ""}
log: {level: warn}
`, upstream)
}

// leaseRun starts `fencegate lease run ARGS -- leasejob JOB...` against p.
func leaseRun(t *testing.T, p *Proc, args []string, job ...string) *CLIProc {
	t.Helper()
	env := []string{"FENCEGATE_COORDINATOR=" + p.URL("coordinator")}
	if _, ok := p.addrs["gateway"]; ok {
		env = append(env, "FENCEGATE_URL="+p.URL("gateway"))
	}
	argv := append([]string{"lease", "run"}, args...)
	argv = append(argv, "--", testenv.BuildBinary(t, "./e2e/testdata/leasejob"))
	return startCLI(t, env, append(argv, job...)...)
}

var jobPid = regexp.MustCompile(`ready pid=(\d+)`)

// The design's seed test 1 with a wrapped job: fencegate and its job are
// paused (SIGSTOP) past the lease's TTL; B takes the lease and writes; the
// job resumes and writes with its old token, then fencegate resumes, finds
// the lease expired and terminates the job, whose last write on SIGTERM is
// refused too. The upstream's history has none of the job's writes after
// B's.
func TestLeaseRunPausedJobTerminatedAndRefused(t *testing.T) {
	rec, up := newUpstream(t)
	p := startFencegate(t, leaseRunYAML(up))
	r := leaseRun(t, p, []string{"-ttl", "1s", "-grace", "10s", "-owner", "job-a", "/orders/7"}, "write")
	m := jobPid.FindStringSubmatch(r.WaitOutput("ready pid="))
	pid, _ := strconv.Atoi(m[1])
	r.WaitOutput("-> 200")

	syscall.Kill(-pid, syscall.SIGSTOP) // the job's process group
	r.Signal(syscall.SIGSTOP)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := coordinatorClient(p, "worker-b").Acquire(ctx, "/orders/7", client.Options{TTL: time.Minute, Wait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if st, body := write(t, "PUT", p.URL("gateway")+"/orders/7", strconv.FormatInt(b.Token, 10), "B"); st != 200 {
		t.Fatalf("B's write: %d %s", st, body)
	}

	syscall.Kill(-pid, syscall.SIGCONT)
	r.WaitOutput("-> 409") // the zombie job writes before fencegate wakes up
	r.Signal(syscall.SIGCONT)
	if code := r.Wait(); code != 4 {
		t.Fatalf("lease run exited %d; want 4 (lease lost)", code)
	}
	out := r.Out.String()
	for _, want := range []string{"SIGTERM; last write -> 409", "lost: lease could not be renewed before it expired; command terminated"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	h := rec.HistoryOf("/orders/7")
	if len(h) < 2 || h[len(h)-1].Value != "B" {
		t.Fatalf("upstream applied %s; want the job's writes, then B's last", recorder.Summary(h))
	}
	for _, a := range h[:len(h)-1] {
		if a.Token == strconv.FormatInt(b.Token, 10) {
			t.Fatalf("upstream applied %s; want B's write last", recorder.Summary(h))
		}
	}
	if v, _ := rec.Get("/orders/7"); v != "B" {
		t.Fatalf("upstream holds %q; want B", v)
	}
}

// A refused renewal (here: the job released its own lease, as a newer
// owner's acquisition would also end it) stops a job that ignores SIGTERM
// with SIGKILL after the grace period.
func TestLeaseRunRenewalRefusedKillsAfterGrace(t *testing.T) {
	p := startFencegate(t, coordinatorOnlyYAML)
	r := leaseRun(t, p, []string{"-ttl", "3s", "-grace", "300ms", "/orders/1"}, "release-and-hang")
	r.WaitOutput(`released: {"released":true}`)
	if code := r.Wait(); code != 4 {
		t.Fatalf("lease run exited %d; want 4 (lease lost)", code)
	}
	if out := r.Out.String(); !strings.Contains(out, "lease_lost") || !strings.Contains(out, "command killed after 300ms") {
		t.Fatalf("output lacks the reason or the kill:\n%s", out)
	}
}

// The coordinator killed: the lease cannot be renewed, so before it
// expires the job is terminated.
func TestLeaseRunCoordinatorGone(t *testing.T) {
	p := startFencegate(t, coordinatorOnlyYAML)
	r := leaseRun(t, p, []string{"-ttl", "1s", "/orders/2"}, "signals")
	r.WaitOutput("ready")
	p.Kill9()
	if code := r.Wait(); code != 4 {
		t.Fatalf("lease run exited %d; want 4 (lease lost)", code)
	}
	out := r.Out.String()
	for _, want := range []string{fmt.Sprintf("got %d", syscall.SIGTERM), "could not be renewed before it expired; command terminated"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

const coordinatorOnlyYAML = `
store:
  embedded: {path: $DIR/fencegate.db}
coordinator: {enabled: true, listen: $COORDINATOR}
admin: {listen: ""}
log: {level: warn}
`

// The job's exit status is fencegate's; the lease is released when it
// exits; the job sees the lease in its environment.
func TestLeaseRunExitStatusAndEnv(t *testing.T) {
	p := startFencegate(t, coordinatorOnlyYAML)
	show := func(res string) bool {
		r, err := coordinatorClient(p, "x").Show(context.Background(), res)
		if err != nil {
			t.Fatal(err)
		}
		return r.Held
	}

	r := leaseRun(t, p, []string{"/orders/3", "-owner", "job-3", "-gateway", "http://gw.example:8080"}, "env")
	if code := r.Wait(); code != 0 {
		t.Fatalf("env job: exit %d", code)
	}
	out := r.Out.String()
	for _, re := range []string{`(?m)^FENCING_TOKEN=[1-9][0-9]*$`, `(?m)^FENCING_RESOURCE=/orders/3$`, `(?m)^FENCING_OWNER=job-3$`, `(?m)^FENCEGATE_URL=http://gw.example:8080$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("job environment lacks %s:\n%s", re, out)
		}
	}
	if show("/orders/3") {
		t.Error("lease still held after the job exited")
	}

	r = leaseRun(t, p, []string{"/orders/3"}, "exit", "7")
	if code := r.Wait(); code != 7 {
		t.Fatalf("exit 7 job: lease run exited %d", code)
	}
	if out := r.Out.String(); out != "" {
		t.Errorf("lease run printed %q for a job's own exit status", out)
	}
	if show("/orders/3") {
		t.Error("lease still held after the job exited 7")
	}

	// Held by someone else: exit 3 without running the job.
	held, err := coordinatorClient(p, "other").AcquireOnce(context.Background(), "/orders/4", client.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r = leaseRun(t, p, []string{"/orders/4"}, "env")
	if code := r.Wait(); code != 3 || strings.Contains(r.Out.String(), "FENCING_TOKEN") {
		t.Fatalf("held lease: exit %d, output %q; want 3 and the job not run", code, r.Out.String())
	}
	coordinatorClient(p, "other").Release(context.Background(), "/orders/4", held.Token)

	// Usage mistakes: exit 2.
	for _, args := range [][]string{{"/orders/5"}, {"--", "true"}, {"/a", "/b", "--", "true"}} {
		c := startCLI(t, []string{"FENCEGATE_COORDINATOR=" + p.URL("coordinator")}, append([]string{"lease", "run"}, args...)...)
		if code := c.Wait(); code != 2 {
			t.Errorf("lease run %q: exit %d; want 2\n%s", args, code, c.Out.String())
		}
	}
	// A command that cannot be started: 127, lease released.
	c := startCLI(t, []string{"FENCEGATE_COORDINATOR=" + p.URL("coordinator")}, "lease", "run", "/orders/6", "--", "/nonexistent/job")
	if code := c.Wait(); code != 127 {
		t.Errorf("missing command: exit %d; want 127\n%s", code, c.Out.String())
	}
	if show("/orders/6") {
		t.Error("lease still held after the command failed to start")
	}
}

// Signals to fencegate reach the job; the job's status after SIGTERM is
// passed on and the lease released.
func TestLeaseRunForwardsSignals(t *testing.T) {
	p := startFencegate(t, coordinatorOnlyYAML)
	r := leaseRun(t, p, []string{"/orders/8"}, "signals")
	r.WaitOutput("ready")
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGHUP, syscall.SIGINT} {
		r.Signal(sig)
		r.WaitOutput(fmt.Sprintf("got %d\n", sig))
	}
	r.Signal(syscall.SIGTERM)
	if code := r.Wait(); code != 143 {
		t.Fatalf("lease run exited %d; want the job's 143", code)
	}
	lr, err := coordinatorClient(p, "x").Show(context.Background(), "/orders/8")
	if err != nil || lr.Held {
		t.Fatalf("after the job exited: held %v, %v", lr.Held, err)
	}
}
