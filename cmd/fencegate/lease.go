package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/fencegate/fencegate/coordinator"
	"github.com/fencegate/fencegate/coordinator/client"
)

// Exit codes of fencegate lease, for scripts.
const (
	exitLeaseHeld = 3 // acquire: another owner holds the lease
	exitLeaseLost = 4 // renew: the lease is not current (expired, released, superseded)
	exitNotHeld   = 5 // show: no live lease on the resource
)

// leaseCmd talks to a coordinator's HTTP API:
//
//	fencegate lease acquire [flags] RESOURCE        prints the token
//	fencegate lease renew   [flags] RESOURCE TOKEN  prints the token
//	fencegate lease release [flags] RESOURCE TOKEN  prints true or false
//	fencegate lease show    [flags] RESOURCE        prints the token of the live lease
//
// Exit status: 0 done, 1 any other failure (coordinator unreachable or
// unavailable), 2 usage, 3 lease held, 4 lease lost, 5 (show) not held.
type leaseCmd struct{}

const leaseSynopsis = `acquire|renew|release|show|run [flags] RESOURCE [TOKEN]

  acquire RESOURCE        take the lease; prints its token
  renew RESOURCE TOKEN    extend it; prints the token
  release RESOURCE TOKEN  end it; prints true, or false if it was not current
  show RESOURCE           prints the live lease's token
  run RESOURCE -- CMD     run CMD under the lease ('fencegate lease run -h')

Flags come before RESOURCE. Exit status: 0 ok, 1 other failure, 2 usage,
3 lease held by another owner, 4 lease lost, 5 (show) no live lease.`

func (c *leaseCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("lease", leaseSynopsis)
	url := fs.String("coordinator", envOr("FENCEGATE_COORDINATOR", "http://127.0.0.1:8081"), "coordinator `URL` (env FENCEGATE_COORDINATOR)")
	host, _ := os.Hostname()
	owner := fs.String("owner", envOr("FENCEGATE_OWNER", host), "lease owner `name` (env FENCEGATE_OWNER; default the host name)")
	ttl := fs.Duration("ttl", 0, "lease time for acquire and renew (default: the coordinator's default_ttl)")
	wait := fs.Duration("wait", 0, "acquire: how long to wait for a held lease")
	out := fs.String("o", "token", "output: token or json (the whole record)")
	key := fs.String("api-key", "", "coordinator API `key` (default env FENCEGATE_API_KEY; prefer the environment: flags show in ps)")
	if len(args) == 0 {
		return usagef("missing subcommand: acquire, renew, release or show")
	}
	if ok, err := listSub(ctx, "leases", args); ok { // list.go (admin API)
		return err
	}
	sub := args[0]
	if sub == "run" {
		return (&leaseRunCmd{}).Run(ctx, args[1:])
	}
	if sub == "-h" || sub == "--help" {
		fs.Usage()
		return flag.ErrHelp
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *out != "token" && *out != "json" {
		return usagef("-o must be token or json, got %q", *out)
	}
	want := map[string]int{"acquire": 1, "show": 1, "renew": 2, "release": 2}
	n, ok := want[sub]
	if !ok {
		return usagef("unknown subcommand %q: want acquire, renew, release or show", sub)
	}
	if fs.NArg() != n {
		return usagef("%s takes %d argument(s), got %d (flags go before RESOURCE)", sub, n, fs.NArg())
	}
	res := fs.Arg(0)
	var token int64
	if n == 2 {
		t, err := strconv.ParseInt(fs.Arg(1), 10, 64)
		if err != nil || t <= 0 {
			return usagef("TOKEN must be a positive integer, got %q", fs.Arg(1))
		}
		token = t
	}
	cl := &client.Client{URL: *url, Owner: *owner, APIKey: apiKey(*key), HTTPClient: &http.Client{Timeout: *wait + coordinator.AnswerMargin}}

	var rec coordinator.LeaseResponse
	var err error
	switch sub {
	case "acquire":
		rec, err = cl.AcquireOnce(ctx, res, client.Options{TTL: *ttl, Wait: *wait})
	case "renew":
		rec, err = cl.Renew(ctx, res, token, *ttl)
	case "show":
		rec, err = cl.Show(ctx, res)
	case "release":
		released, err := cl.Release(ctx, res, token)
		if err != nil {
			return leaseExit(err)
		}
		if *out == "json" {
			return printJSON(coordinator.ReleaseResponse{Released: released})
		}
		fmt.Println(released)
		return nil
	}
	if err != nil {
		return leaseExit(err)
	}
	if *out == "json" {
		if err := printJSON(rec); err != nil {
			return err
		}
	} else if rec.Held {
		fmt.Println(rec.Token)
	}
	if !rec.Held {
		return &exitError{code: exitNotHeld, err: fmt.Errorf("no live lease on %s", res)}
	}
	return nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(v)
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
