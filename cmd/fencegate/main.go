// Command fencegate is the fencing write-gateway: one binary for the proxy,
// the lease coordinator and their operator tools. Each subcommand lives in a
// file of its own and only wires: the configuration is mapped to the
// libraries by package server. `fencegate help` lists the subcommands
// (serve, validate, config, lease, fence, refusals, migrate, doctor, demo,
// upstream, version).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencegate/fencegate/config"
)

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

// commands maps subcommand names to constructors; each subcommand lives in
// its own file.
var commands = map[string]func() command{
	"serve":    func() command { return &serveCmd{} },
	"validate": func() command { return &validateCmd{} },
	"fence":    func() command { return &fenceCmd{} },
	"demo":     func() command { return &demoCmd{} },
	"lease":    func() command { return &leaseCmd{} },
	"migrate":  func() command { return &migrateCmd{} },
	"version":  func() command { return &versionCmd{} },
	"doctor":   func() command { return &doctorCmd{} },
	"refusals": func() command { return &listCmd{what: "refusals"} },
	"upstream": func() command { return &upstreamCmd{} },
	"config":   func() command { return &configCmd{} },
}

// usageError is a mistake in the command line; main prints it with a hint.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitCoder lets a subcommand choose its exit status (scripts test them).
type exitCoder interface{ ExitCode() int }

const usage = `usage: fencegate <command> [flags]

commands:
  serve     -c FILE    run the gateway, coordinator and admin listeners FILE configures
  validate  -c FILE    check a configuration file and exit
  config    schema     print the configuration's JSON Schema
  lease     ...        acquire, renew, release or show leases (coordinator API)
  fence     ...        show, advance or list fences (admin API)
  refusals             print the gateway's recent refusals (admin API)
  migrate   -c FILE    apply database migrations
  doctor    -c FILE    check that upstreams behave as the configuration needs
  demo                 run the stale-owner story on the embedded store
  upstream  -listen A  a sample upstream that records writes (for the Quickstart)
  version              print the version and commit (also: --version)

Run 'fencegate <command> -h' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	if name == "-h" || name == "--help" || name == "help" {
		fmt.Print(usage)
		return
	}
	mk, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "fencegate: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := mk().Run(ctx, os.Args[2:])
	if err == nil {
		return
	}
	var ue *usageError
	var ec exitCoder
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "fencegate %s: %v\nRun 'fencegate %s -h' for usage.\n", name, err, name)
		os.Exit(2)
	case errors.As(err, &ec):
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(os.Stderr, "fencegate %s: %s\n", name, msg)
		}
		os.Exit(ec.ExitCode())
	default:
		fmt.Fprintf(os.Stderr, "fencegate %s: %v\n", name, err)
		os.Exit(1)
	}
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("fencegate "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: fencegate %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	return nil
}

// configFlag adds the -c flag every command that reads the configuration
// file takes.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("c", "fencegate.yaml", "configuration `file`")
}

// parseConfig parses args (flags only: a stray argument is a usage error,
// not silently ignored) and loads the configuration file named by path.
func parseConfig(fs *flag.FlagSet, path *string, args []string) (*config.Config, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	return config.Load(*path)
}
