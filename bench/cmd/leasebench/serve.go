package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/server"
)

// serveYAML is the configuration of the coordinator process the HTTP
// runners call: `fencegate serve` with only the coordinator, on the
// benchmark's database, its pool as large as the clients (pgbench has one
// connection per client too). The log level is warn, which every run below
// stays under (one line per fresh lease is written at info).
//
// mode is fence.mode: shared (the coordinator beside shared replicas; fence
// on issuance is in the acquire statement) or local (no gateway: fence on
// issuance is the local fence's advance, a transaction of its own).
func serveYAML(dbURL string, clients int, mode string) string {
	return fmt.Sprintf(`store:
  postgres: {url: %q, max_conns: %d, timeout: 5s}
fence: {mode: %s}
coordinator: {enabled: true, listen: "127.0.0.1:0", max_ttl: %s}
admin: {listen: ""}
log: {level: warn}
`, dbURL, clients, mode, 2*ttl)
}

// serveMain is the child mode (-serve FILE): the code of `fencegate serve`
// (server.New and Start, telemetry on, tracing off) on the configuration in
// FILE. It prints the coordinator's address on stdout and runs until its
// stdin closes, so the parent can measure this process's CPU apart from the
// load generator's.
func serveMain(cfgFile, cpuprofile string) error {
	cfg, err := config.Load(cfgFile)
	if err != nil {
		return err
	}
	ctx := context.Background()
	srv, err := server.New(ctx, cfg, server.Options{Logger: server.NewLogger(os.Stderr, cfg.Log)})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Println(srv.Addr("coordinator"))
	io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// coordProc is the coordinator process of the HTTP runners.
type coordProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
}

func startCoordinator(dir, dbURL string, clients int, mode, cpuprofile string) (*coordProc, error) {
	cfgFile := dir + "/coordinator.yaml"
	if err := os.WriteFile(cfgFile, []byte(serveYAML(dbURL, clients, mode)), 0o600); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-serve", cfgFile}
	if cpuprofile != "" {
		args = append(args, "-cpuprofile", cpuprofile)
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		cmd.Wait()
		return nil, fmt.Errorf("coordinator process did not start: %w", err)
	}
	return &coordProc{cmd: cmd, stdin: stdin, addr: strings.TrimSpace(line)}, nil
}

// cpu is the CPU time the process has used so far.
func (p *coordProc) cpu() time.Duration { return procCPU(strconv.Itoa(p.cmd.Process.Pid), false) }

func (p *coordProc) stop() error {
	p.stdin.Close()
	return p.cmd.Wait()
}
