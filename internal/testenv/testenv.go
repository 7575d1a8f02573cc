// Package testenv starts real components (PostgreSQL, an S3 server, an ACME CA,
// Jaeger, Toxiproxy) on loopback for tests, and builds the fencegate binary for
// black-box tests. Every starter returns connection details and registers
// t.Cleanup to stop what it started.
//
// Server binaries are looked up in <repo>/.cache/bin (built by scripts/tools.sh)
// and then in PATH; PostgreSQL comes from the Debian package (scripts/deps.sh).
// When a component is missing the test is skipped with a hint, except when the
// environment has CI=true: then it fails, so CI never passes by skipping.
//
// Packages that call Postgres must have
//
//	func TestMain(m *testing.M) { testenv.RunMain(m) }
//
// so the cluster shared by the test binary is stopped and removed at exit.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mainModule is the module whose root RepoRoot looks for.
const mainModule = "github.com/fencegate/fencegate"

var (
	atExitMu sync.Mutex
	atExit   []func()
	// mainRunning is set by RunMain; the shared PostgreSQL cluster requires it,
	// since nothing else would stop it.
	mainRunning bool
)

// RunMain runs the tests of m, then stops every PostgreSQL cluster and removes
// every binary this test binary started or built, and exits with the tests'
// status. Call it from TestMain in every package that uses Postgres or
// BuildBinary.
func RunMain(m *testing.M) {
	atExitMu.Lock()
	mainRunning = true
	atExitMu.Unlock()
	code := m.Run()
	atExitMu.Lock()
	fns := atExit
	atExit = nil
	atExitMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	os.Exit(code)
}

func onExit(f func()) {
	atExitMu.Lock()
	defer atExitMu.Unlock()
	atExit = append(atExit, f)
}

// CI reports whether the tests run in CI (CI=true), where a missing component
// is a failure instead of a skip.
func CI() bool { return os.Getenv("CI") == "true" }

// missing fails (CI=true) or skips the test because component is unavailable.
func missing(t testing.TB, component, hint string) {
	t.Helper()
	if CI() {
		t.Fatalf("testenv: %s is not available (CI=true, so this is a failure, not a skip): %s", component, hint)
	}
	t.Skipf("testenv: %s is not available: %s", component, hint)
}

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// RepoRoot returns the directory holding the go.mod of module
// github.com/fencegate/fencegate, found by walking up from the working
// directory (go test runs each test binary in its package directory).
func RepoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && modulePath(b) == mainModule {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = fmt.Errorf("no go.mod of module %s above the working directory", mainModule)
				return
			}
			dir = parent
		}
	})
	return root, rootErr
}

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// LookBinary finds a tool binary in <repo>/.cache/bin, then in PATH.
func LookBinary(name string) (string, error) {
	if r, err := RepoRoot(); err == nil {
		p := filepath.Join(r, ".cache", "bin", name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

// tool returns the path of a binary built by scripts/tools.sh, or skips/fails.
func tool(t testing.TB, name, toolsArg string) string {
	t.Helper()
	p, err := LookBinary(name)
	if err != nil {
		missing(t, name, fmt.Sprintf("run scripts/tools.sh %s (builds it into .cache/bin)", toolsArg))
	}
	return p
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that it has not returned before in this process. Without the memory two
// calls in a row could return the same port, and a gateway configured with
// it twice refuses to start (seen in a full test run: admin.listen equal to
// gateway.listen). The port is drawn at random below the kernel's ephemeral
// range: a port from that range (what listening on :0 gives) can be taken,
// before the caller binds it, by any connection's source port or any :0
// listener of the processes that share the machine (seen in a fresh-clone
// CI run: a gateway's listen address taken while toxiproxy and Apache
// started beside it). Below the range only another FreePort caller, drawing
// at random too, can take it.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := 10000, ephemeralLow()-1 // 10000: above the ports most daemons listen on
	for range 1000 {
		port := lo + rand.IntN(hi-lo+1)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		l.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatalf("testenv: no free port in %d-%d after 1000 tries", lo, hi)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read), never below 12000 so that FreePort keeps
// a range of its own.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	return max(low, 12000)
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// WaitTCP waits until addr (host:port) accepts a TCP connection, failing the
// test after timeout.
func WaitTCP(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	if err := waitTCP(context.Background(), addr, timeout, nil); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// WaitHTTP waits until url answers an HTTP GET with any status (a server that
// says 403 is up), failing the test after timeout. https URLs are not verified.
func WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	if err := waitHTTP(context.Background(), url, timeout, nil); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// poll calls try every 50ms until it succeeds, exited is closed (the server
// process died), or timeout passes.
func poll(ctx context.Context, timeout time.Duration, exited <-chan struct{}, what string, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		last = try(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: process exited before it was ready (last error: %v)", what, last)
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready after %v: %v", what, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitTCP(ctx context.Context, addr string, timeout time.Duration, exited <-chan struct{}) error {
	return poll(ctx, timeout, exited, "tcp "+addr, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
}

var insecureClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: insecureTLS(),
	Proxy:           nil,
}}

func waitHTTP(ctx context.Context, url string, timeout time.Duration, exited <-chan struct{}) error {
	return poll(ctx, timeout, exited, "GET "+url, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := insecureClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

// process is a server child process whose output goes to a log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done
}

// startProcess starts bin with args, stdout and stderr appended to logPath.
// The child gets SIGKILL if the test binary dies without cleaning up
// (Pdeathsig), so a crashed test run leaves no servers behind.
func startProcess(name, logPath string, env []string, cred *syscall.Credential, bin string, args ...string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "### %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := StartDying(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends sig and waits up to timeout for the exit, then kills the whole
// process group.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failStart stops p and fails the test with err and the end of p's log.
func (p *process) failStart(t testing.TB, err error) {
	t.Helper()
	p.stop(syscall.SIGKILL, 5*time.Second)
	t.Fatalf("testenv: %s did not start: %v\n--- last lines of %s ---\n%s", p.name, err, p.log, tail(p.log, 40))
}

// cleanup registers stopping p at the end of t, logging its output tail when
// the test failed.
func (p *process) cleanup(t testing.TB, sig syscall.Signal) {
	t.Cleanup(func() {
		p.stop(sig, 10*time.Second)
		if t.Failed() {
			t.Logf("testenv: last lines of %s log %s:\n%s", p.name, p.log, tail(p.log, 20))
		}
	})
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logDir returns a directory for server logs: t.TempDir, so it lives as long
// as the test.
func logPath(t testing.TB, name string) string {
	return filepath.Join(t.TempDir(), name+".log")
}

// startServer starts a server on free ports, retrying with new ports when
// ready fails (usually a port taken between FreePort and bind). args gets the
// chosen ports.
func startServer(t testing.TB, name string, nports int, env []string, bin string, args func(ports []int) []string, ready func(ctx context.Context, p *process, ports []int) error) (*process, []int) {
	t.Helper()
	log := logPath(t, name)
	var lastErr error
	var p *process
	for attempt := 0; attempt < 3; attempt++ {
		ports := make([]int, nports)
		for i := range ports {
			ports[i] = FreePort(t)
		}
		var err error
		p, err = startProcess(name, log, env, nil, bin, args(ports)...)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if lastErr = ready(context.Background(), p, ports); lastErr == nil {
			p.cleanup(t, syscall.SIGTERM)
			return p, ports
		}
		if !p.exited() {
			break // alive but not answering: not a port race, do not retry
		}
	}
	p.failStart(t, lastErr)
	return nil, nil
}

// StartDying starts cmd, whose SysProcAttr asks for Pdeathsig, from one
// goroutine locked to its OS thread for the life of the test binary.
// Pdeathsig fires when the *thread* that forked the child exits, not the
// process (go.dev/issue/27505), and the runtime ends a thread whenever a
// goroutine exits locked to it; locking only around Start, as before, did
// not keep the forking thread alive afterwards. The spawner's thread exits
// only with the process.
func StartDying(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives on
			for r := range spawns {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawns <- spawn{cmd, done}
	return <-done
}

type spawn struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawns    = make(chan spawn)
	spawnOnce sync.Once
)
