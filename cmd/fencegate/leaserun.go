package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/spf13/cobra"
)

// leaseRunCmd wraps a job in a lease, the way `consul lock` and `etcdctl
// lock` do: acquire, run CMD with the token in its environment, renew in
// the background, and stop CMD the moment the lease is lost.
//
// CMD runs in its own process group, so that a lease loss stops everything
// it started (a shell script's children write with the same token), and so
// that a terminal's Ctrl-C reaches CMD once, through fencegate, not twice.
type leaseRunCmd struct {
	url, owner, gateway, key string
	ttl, wait, grace         time.Duration
}

func newLeaseRunCmd() *cobra.Command {
	c := &leaseRunCmd{}
	cmd := &cobra.Command{
		Use:   "run RESOURCE [flags] -- CMD [ARGS...]",
		Short: "run CMD under the lease on RESOURCE",
		Long: `Run acquires the lease on RESOURCE (waiting up to --wait for a held one),
runs CMD with FENCING_TOKEN, FENCING_RESOURCE, FENCING_OWNER and FENCEGATE_URL
in its environment and renews the lease in the background. Signals sent to
fencegate (INT, TERM, HUP, QUIT, USR1, USR2) are passed to CMD's process
group. When CMD exits the lease is released and fencegate exits with CMD's
status (128+N if a signal N ended it).

When the lease is lost (the coordinator refused a renewal, or could not be
reached before the lease expired), CMD's process group gets SIGTERM, then
SIGKILL after --grace, and fencegate exits 4 with the reason. CMD must still
send FENCING_TOKEN with every write: it is the gateway that refuses the
writes of a job that paused past its lease, not the signal.

Everything after -- is CMD and its arguments, passed on as they are.

Exit status: CMD's, or 2 usage, 3 lease held (after --wait), 4 lease lost,
1 other failure (coordinator unreachable), 127 CMD could not be started.`,
		Example: `  fencegate lease run /orders/7 --ttl 30s --wait 1m -- ./ship-order 7
  fencegate lease run -ttl 30s /reports/daily -- sh -c 'make-report --token "$FENCING_TOKEN"'`,
		Args: cobra.ArbitraryArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&c.url, "coordinator", envOr("FENCEGATE_COORDINATOR", "http://127.0.0.1:8081"), "coordinator `URL` (env FENCEGATE_COORDINATOR)")
	fs.StringVar(&c.owner, "owner", "", "lease owner `name` (default env FENCEGATE_OWNER, else host:pid, unique per run)")
	fs.StringVar(&c.gateway, "gateway", envOr("FENCEGATE_URL", "http://127.0.0.1:8080"), "gateway `URL` passed to CMD as FENCEGATE_URL (env FENCEGATE_URL)")
	apiKeyFlag(fs, &c.key, "coordinator")
	fs.DurationVar(&c.ttl, "ttl", 0, "lease time, like 30s or 1m, renewed at a third of it (default: the coordinator's default_ttl)")
	fs.DurationVar(&c.wait, "wait", 0, "how long to wait for a lease held by another owner, like 1m")
	fs.DurationVar(&c.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lease is lost")
	wrap(cmd, c)
	// CMD is what follows "--"; Run finds it there again.
	cmd.RunE = func(cc *cobra.Command, args []string) error {
		if n := cc.ArgsLenAtDash(); n >= 0 {
			args = append(append(args[:n:n], "--"), args[n:]...)
		}
		return c.Run(cc.Context(), args)
	}
	return cmd
}

// Run wants RESOURCE -- CMD [ARGS...].
func (c *leaseRunCmd) Run(ctx context.Context, args []string) error {
	pos := args
	var cmdArgs []string
	for i, a := range args {
		if a == "--" {
			pos, cmdArgs = args[:i], args[i+1:]
			break
		}
	}
	if len(pos) != 1 {
		return usagef("run takes one RESOURCE before --, got %d argument(s)", len(pos))
	}
	if len(cmdArgs) == 0 {
		return usagef("missing command: fencegate lease run RESOURCE -- CMD [ARGS...]")
	}
	if c.grace < 0 {
		return usagef("--grace must not be negative")
	}
	res := pos[0]

	// The lease must outlive main's signal context (a SIGTERM to fencegate
	// is CMD's to handle), but a signal while waiting for the lease
	// abandons the acquisition.
	acqCtx, cancelAcq := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAcq()
	stopAbort := context.AfterFunc(ctx, cancelAcq)
	owner := c.owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = envOr("FENCEGATE_OWNER", host+":"+strconv.Itoa(os.Getpid()))
	}
	cl := &client.Client{URL: c.url, Owner: owner, APIKey: apiKey(c.key), HTTPClient: &http.Client{Timeout: c.wait + coordinator.AnswerMargin}}
	lease, err := cl.Acquire(acqCtx, res, client.Options{TTL: c.ttl, Wait: c.wait})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("acquire lease on %s: interrupted", res)
		}
		return leaseExit(fmt.Errorf("acquire lease on %s: %w", res, err))
	}
	defer lease.Close()
	// From here on signals are CMD's (queued until it starts).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if !stopAbort() {
		return fmt.Errorf("acquire lease on %s: interrupted", res)
	}

	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"FENCING_TOKEN="+strconv.FormatInt(lease.Token, 10),
		"FENCING_RESOURCE="+lease.Resource,
		"FENCING_OWNER="+lease.Owner,
		"FENCEGATE_URL="+c.gateway,
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return &exitError{code: 127, err: fmt.Errorf("start %s: %w", cmdArgs[0], err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Signal the group (negative pid): CMD and everything it started.
	group := func(sig syscall.Signal) { syscall.Kill(-cmd.Process.Pid, sig) }

	for {
		select {
		case sig := <-sigs:
			group(sig.(syscall.Signal))
		case err := <-exited:
			if lease.Err() != nil {
				// Lost while CMD was exiting: its status says nothing
				// about whether its writes were under the lease.
				return lostError(res, lease, "")
			}
			if cerr := lease.Close(); cerr != nil {
				fmt.Fprintf(os.Stderr, "fencegate lease run: %v\n", cerr)
			}
			return cmdExit(err)
		case <-lease.Done():
			group(syscall.SIGTERM)
			how := "terminated"
			select {
			case <-exited:
			case <-time.After(c.grace):
				group(syscall.SIGKILL)
				<-exited
				how = "killed after " + c.grace.String()
			}
			return lostError(res, lease, how)
		}
	}
}

func lostError(res string, lease *client.Lease, how string) error {
	msg := fmt.Sprintf("lease on %s with token %d lost: %v", res, lease.Token, lease.Err())
	if how != "" {
		msg += "; command " + how
	}
	return &exitError{code: exitLeaseLost, err: errors.New(msg)}
}

// cmdExit turns CMD's end into fencegate's exit status, the shell's way.
func cmdExit(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return &exitError{code: code, err: err, quiet: true}
}
