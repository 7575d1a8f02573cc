// Package e2e holds black-box tests over real fencegate processes: the built
// binary, started with a configuration file, against real upstreams, killed
// and restarted the way the design's stale-owner tests demand.
package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Proc is one fencegate process under test.
type Proc struct {
	t       testing.TB
	bin     string
	Dir     string // working directory; $DIR in the config
	CfgPath string
	addrs   map[string]string // listener name -> host:port
	cmd     *exec.Cmd
	log     *testenv.LogBuffer
	exited  chan struct{}
	// serveArgs are added to `fencegate serve -c FILE` on (re)start.
	serveArgs []string
}

// startFencegate writes yaml to a config file and runs `fencegate serve` on
// it. Placeholders: $GATEWAY, $ADMIN, $COORDINATOR become free loopback
// addresses (the same across restarts), $DIR the process's directory. It
// returns when every configured listener accepts connections.
func startFencegate(t testing.TB, yaml string, env ...string) *Proc {
	t.Helper()
	return startFencegateBin(t, testenv.BuildBinary(t, "./cmd/fencegate"), yaml, env...)
}

// startFencegateBin is startFencegate with the binary bin (another build,
// for before/after benchmarks).
func startFencegateBin(t testing.TB, bin, yaml string, env ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, bin: bin, Dir: t.TempDir(), addrs: map[string]string{}}
	for _, name := range []string{"GATEWAY", "ADMIN", "COORDINATOR"} {
		if strings.Contains(yaml, "$"+name) {
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			p.addrs[strings.ToLower(name)] = addr
			yaml = strings.ReplaceAll(yaml, "$"+name, addr)
		}
	}
	yaml = strings.ReplaceAll(yaml, "$DIR", p.Dir)
	p.CfgPath = filepath.Join(p.Dir, "fencegate.yaml")
	if err := os.WriteFile(p.CfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start(env)
	t.Cleanup(func() {
		p.Kill9()
		if t.Failed() {
			t.Logf("fencegate log (%s):\n%s", p.CfgPath, p.log.Tail(60))
		}
	})
	return p
}

func (p *Proc) start(env []string) {
	p.t.Helper()
	p.log = &testenv.LogBuffer{}
	p.cmd = exec.Command(p.bin, append([]string{"serve", "-c", p.CfgPath}, p.serveArgs...)...)
	p.cmd.Dir = p.Dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	// A test binary that dies (a fuzz worker restarted, a timeout's panic)
	// takes its gateways with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testenv.StartDying(p.cmd); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, ch chan struct{}) { cmd.Wait(); close(ch) }(p.cmd, p.exited)
	deadline := time.Now().Add(20 * time.Second)
	for name, addr := range p.addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-p.exited:
				p.t.Fatalf("fencegate exited before listening (%v):\n%s", p.cmd.ProcessState, p.log.Tail(40))
			default:
			}
			if time.Now().After(deadline) {
				p.t.Fatalf("fencegate %s listener %s not up after 20s:\n%s", name, addr, p.log.Tail(40))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// URL returns http://addr of a listener: "gateway", "admin", "coordinator".
func (p *Proc) URL(name string) string {
	a, ok := p.addrs[name]
	if !ok {
		p.t.Fatalf("no %s listener in this config", name)
	}
	return "http://" + a
}

// Kill9 kills the process without any chance to clean up.
func (p *Proc) Kill9() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Signal sends sig and returns at once.
func (p *Proc) Signal(sig os.Signal) { p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits for a clean exit.
func (p *Proc) Stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		p.t.Fatalf("fencegate did not exit after SIGTERM:\n%s", p.log.Tail(40))
	}
	if !p.cmd.ProcessState.Success() {
		p.t.Fatalf("fencegate exited with %v after SIGTERM:\n%s", p.cmd.ProcessState, p.log.Tail(40))
	}
}

// Restart starts the process again on the same config and addresses. A
// process still running is stopped first (SIGTERM, a clean exit), so the
// new one owns the store and the ports: starting a second process beside a
// running one would leave the test talking to the first while claiming a
// restart, and leave the first running after the test. Restart returns
// when the new process (not an old one) accepts on every listener.
func (p *Proc) Restart(env ...string) {
	p.t.Helper()
	if !p.Exited() {
		p.Stop()
	}
	old := p.cmd.Process.Pid
	p.start(env)
	if p.cmd.Process.Pid == old || p.Exited() {
		p.t.Fatalf("restart: no new process serves (pid %d, was %d):\n%s", p.cmd.Process.Pid, old, p.log.Tail(40))
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Log returns everything the process printed so far.
func (p *Proc) Log() string { return p.log.String() }

// CLIProc is a fencegate command other than serve (e.g. `lease run`),
// running in the background with its output collected.
type CLIProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	Out    *testenv.LogBuffer // stdout and stderr
	exited chan struct{}
	code   int
}

// startCLI runs the fencegate binary with args and env added to the test's
// environment. Cleanup kills it if it is still running.
func startCLI(t testing.TB, env []string, args ...string) *CLIProc {
	t.Helper()
	c := &CLIProc{t: t, Out: &testenv.LogBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(testenv.BuildBinary(t, "./cmd/fencegate"), args...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.Out, c.Out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testenv.StartDying(c.cmd); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := c.cmd.Wait()
		c.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			c.code = ee.ExitCode()
		} else if err != nil {
			c.code = -1
		}
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("fencegate %s output:\n%s", strings.Join(args, " "), c.Out.Tail(40))
		}
	})
	return c
}

// Pid is the process id.
func (c *CLIProc) Pid() int { return c.cmd.Process.Pid }

// Signal sends sig to the process.
func (c *CLIProc) Signal(sig syscall.Signal) { syscall.Kill(c.Pid(), sig) }

// Wait waits for the process to exit (at most a minute) and returns its
// exit status.
func (c *CLIProc) Wait() int {
	c.t.Helper()
	select {
	case <-c.exited:
		return c.code
	case <-time.After(time.Minute):
		c.t.Fatalf("still running after a minute:\n%s", c.Out.Tail(40))
		return -1
	}
}

// WaitOutput waits until the output contains s (at most 30s) and returns
// the output so far.
func (c *CLIProc) WaitOutput(s string) string {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := c.Out.String()
		if strings.Contains(out, s) {
			return out
		}
		select {
		case <-c.exited:
			c.t.Fatalf("exited (%d) before printing %q:\n%s", c.code, s, out)
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no %q after 30s:\n%s", s, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
