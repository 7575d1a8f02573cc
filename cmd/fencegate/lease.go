package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/coordinator/client"
	"github.com/spf13/cobra"
)

// Exit codes of fencegate lease, for scripts.
const (
	exitLeaseHeld = 3 // acquire: another owner holds the lease
	exitLeaseLost = 4 // renew: the lease is not current (expired, released, superseded)
	exitNotHeld   = 5 // show: no live lease on the resource
)

// leaseCmd is one of the lease subcommands that talk to a coordinator's
// HTTP API:
//
//	fencegate lease acquire RESOURCE        prints the token
//	fencegate lease renew   RESOURCE TOKEN  prints the token
//	fencegate lease release RESOURCE TOKEN  prints true or false
//	fencegate lease show    RESOURCE        prints the token of the live lease
//
// Exit status: 0 done, 1 any other failure (coordinator unreachable or
// unavailable), 2 usage, 3 lease held, 4 lease lost, 5 (show) not held.
type leaseCmd struct {
	printer
	sub        string // acquire, renew, release, show
	url, owner string
	out, key   string
	ttl, wait  time.Duration
}

const leaseExitStatus = `Exit status: 0 ok, 1 other failure (coordinator unreachable), 2 usage,
3 lease held by another owner, 4 lease lost, 5 (show) no live lease.`

func newLeaseCmd() *cobra.Command {
	subs := []subcommand{
		{"acquire RESOURCE", "take the lease; prints its token",
			"Acquire takes the lease on RESOURCE and prints its fencing token. With\n--wait it waits for a lease another owner holds; without, it exits 3 at once.",
			"  tok=$(fencegate lease acquire /orders/7 --owner worker-a --ttl 30s --wait 10s)"},
		{"renew RESOURCE TOKEN", "extend the lease; prints the token",
			"Renew extends the lease with TOKEN on RESOURCE and prints the token; it\nexits 4 if the lease is no longer current (expired, released, superseded).",
			"  fencegate lease renew /orders/7 42 --owner worker-a --ttl 30s"},
		{"release RESOURCE TOKEN", "end the lease; prints true, or false if it was not current",
			"Release ends the lease with TOKEN on RESOURCE; it prints true, or false\nif that lease was not current any more.",
			"  fencegate lease release /orders/7 42 --owner worker-a"},
		{"show RESOURCE", "print the live lease's token",
			"Show prints the token of the live lease on RESOURCE (or the whole record\nwith -o json); it exits 5 if nobody holds it.",
			"  fencegate lease show /orders/7 -o json"},
	}
	var cmds []*cobra.Command
	for _, s := range subs {
		c := &leaseCmd{sub: strings.Fields(s.use)[0]}
		cmd := s.command(leaseExitStatus, strings.Fields(s.use)[1:]...)
		fs := cmd.Flags()
		fs.StringVar(&c.url, "coordinator", envOr("FENCEGATE_COORDINATOR", "http://127.0.0.1:8081"), "coordinator `URL` (env FENCEGATE_COORDINATOR)")
		fs.StringVar(&c.owner, "owner", "", "lease owner `name` (default env FENCEGATE_OWNER, else the host name)")
		fs.DurationVar(&c.ttl, "ttl", 0, "lease time for acquire and renew, like 30s or 1m (default: the coordinator's default_ttl)")
		fs.DurationVar(&c.wait, "wait", 0, "acquire: how long to wait for a held lease, like 10s")
		fs.StringVarP(&c.out, "output", "o", "token", "output: token or json (the whole record)")
		apiKeyFlag(fs, &c.key, "coordinator")
		choice(cmd, "output", "token", "json")
		// Every lease subcommand has always accepted every lease flag;
		// the help shows those that do something.
		switch c.sub {
		case "renew":
			fs.MarkHidden("wait")
		case "release", "show":
			fs.MarkHidden("wait")
			fs.MarkHidden("ttl")
		}
		cmds = append(cmds, wrap(cmd, c))
	}
	cmds = append(cmds, newLeaseRunCmd(), newListCmd("leases"))
	return group(&cobra.Command{
		Use:   "lease",
		Short: "acquire, renew, release, show, list leases or run a command under one",
		Long: `Lease talks to a lease coordinator (--coordinator, env FENCEGATE_COORDINATOR):
take a lease and print its fencing token, renew, release or show it, list
them all (admin API), or run a command under a lease.

` + leaseExitStatus,
		Example: `  tok=$(fencegate lease acquire /orders/7 --owner worker-a --ttl 30s)
  fencegate lease release /orders/7 "$tok" --owner worker-a
  fencegate lease run /orders/7 --ttl 30s -- ./ship-order 7`,
	}, cmds...)
}

func (c *leaseCmd) Run(ctx context.Context, args []string) error {
	if err := checkChoice("o", c.out, "token", "json"); err != nil {
		return err
	}
	res := args[0]
	var token int64
	if len(args) == 2 {
		t, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || t <= 0 {
			return usagef("TOKEN must be a positive integer, got %q", args[1])
		}
		token = t
	}
	owner := c.owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = envOr("FENCEGATE_OWNER", host)
	}
	cl := &client.Client{URL: c.url, Owner: owner, APIKey: apiKey(c.key), HTTPClient: &http.Client{Timeout: c.wait + coordinator.AnswerMargin}}

	var rec coordinator.LeaseResponse
	var err error
	switch c.sub {
	case "acquire":
		rec, err = cl.AcquireOnce(ctx, res, client.Options{TTL: c.ttl, Wait: c.wait})
	case "renew":
		rec, err = cl.Renew(ctx, res, token, c.ttl)
	case "show":
		rec, err = cl.Show(ctx, res)
	case "release":
		released, err := cl.Release(ctx, res, token)
		if err != nil {
			return leaseExit(unreachable(err, "coordinator", "FENCEGATE_COORDINATOR", c.url))
		}
		if c.out == "json" {
			return printJSON(c.stdout(), coordinator.ReleaseResponse{Released: released})
		}
		fmt.Fprintln(c.stdout(), released)
		return nil
	}
	if err != nil {
		return leaseExit(unreachable(err, "coordinator", "FENCEGATE_COORDINATOR", c.url))
	}
	if c.out == "json" {
		if err := printJSON(c.stdout(), rec); err != nil {
			return err
		}
	} else if rec.Held {
		fmt.Fprintln(c.stdout(), rec.Token)
	}
	if !rec.Held {
		return &exitError{code: exitNotHeld, err: fmt.Errorf("no live lease on %s", res)}
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// leaseExit maps the coordinator's refusals to exit codes.
func leaseExit(err error) error {
	switch {
	case errors.Is(err, client.ErrHeld):
		return &exitError{code: exitLeaseHeld, err: err}
	case errors.Is(err, client.ErrLost):
		return &exitError{code: exitLeaseLost, err: err}
	}
	return err
}

// exitError is an error with the exit status main uses for it. A quiet
// one prints nothing (lease run passing on its command's status).
type exitError struct {
	code  int
	err   error
	quiet bool
}

func (e *exitError) Error() string {
	if e.quiet {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }
