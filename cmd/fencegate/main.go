// Command fencegate is the fencing write-gateway: one binary for the proxy,
// the lease coordinator and their operator tools.
//
//	fencegate serve    -c FILE          run what FILE configures
//	fencegate validate -c FILE          check FILE and exit
//	fencegate lease    acquire|run|...  take, renew, release or list leases
//	fencegate fence    show|advance|... inspect, raise or list fences (admin API)
//	fencegate refusals                  the gateway's recent refusals (admin API)
//	fencegate demo                      play the stale-owner story locally
//	fencegate help CMD                  any command's help, with an example
//	fencegate completion bash|zsh|fish  a shell completion script
//	fencegate version                   (also --version)
//
// The command tree is github.com/spf13/cobra (cli.go); each subcommand is a
// small struct with Run(ctx, args) in its own file.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
