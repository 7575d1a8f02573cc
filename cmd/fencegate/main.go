// Command fencegate is the fencing write-gateway: one binary for the proxy,
// the lease coordinator and their operator tools. Each subcommand lives in a
// file of its own and only wires: the configuration is mapped to the
// libraries by package server.
//
//	fencegate serve    -c FILE          run what FILE configures
//	fencegate validate -c FILE          check FILE and exit
//	fencegate config   schema           print the configuration's JSON Schema
//	fencegate lease    acquire|run|...  take, renew, release or list leases
//	fencegate fence    show|advance|... inspect, raise or list fences (admin API)
//	fencegate refusals                  the gateway's recent refusals (admin API)
//	fencegate migrate                   apply the PostgreSQL schema
//	fencegate doctor   -c FILE          check the upstreams and stores FILE names
//	fencegate demo                      play the stale-owner story locally
//	fencegate upstream                  a recording upstream for the Quickstart
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
