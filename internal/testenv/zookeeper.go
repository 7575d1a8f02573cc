package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// zooKeeperJar is where Debian's zookeeper package puts the server (its
// manifest names the libraries it needs).
const zooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeperServer is a running standalone ZooKeeper server on loopback
// (Debian's zookeeper, scripts/deps.sh).
type ZooKeeperServer struct {
	Addr string // 127.0.0.1:PORT
	p    *process
	java string
	args []string
	log  string
	t    testing.TB
}

// ZooKeeper starts a standalone ZooKeeper server in a temporary directory
// and stops it at the end of the test. It is a JVM: a small heap and the
// serial collector keep it near 100 MB on a shared machine; its admin
// HTTP server (port 8080 by default) is off.
func ZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	java, err := LookBinary("java")
	if _, serr := os.Stat(zooKeeperJar); err != nil || serr != nil {
		missing(t, "zookeeper", "install Debian's zookeeper (scripts/deps.sh)")
	}
	dir := t.TempDir()
	z := &ZooKeeperServer{java: java, t: t, log: logPath(t, "zookeeper")}
	for attempt := 0; ; attempt++ {
		port := FreePort(t)
		z.Addr = "127.0.0.1:" + strconv.Itoa(port)
		z.args = []string{
			"-Xmx64m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dzookeeper.admin.enableServer=false",
			"-cp", zooKeeperJar,
			"org.apache.zookeeper.server.ZooKeeperServerMain",
			strconv.Itoa(port), filepath.Join(dir, "data"),
		}
		z.start()
		err := z.waitReady()
		if err == nil {
			return z
		}
		if !z.p.exited() || attempt == 2 {
			z.p.failStart(t, err)
		}
	}
}

func (z *ZooKeeperServer) start() {
	p, err := startProcess("zookeeper", z.log, nil, nil, z.java, z.args...)
	if err != nil {
		z.t.Fatalf("testenv: %v", err)
	}
	z.p = p
	p.cleanup(z.t, syscall.SIGTERM)
}

// waitReady waits until the server serves (the four-letter word srvr,
// the only one enabled by default).
func (z *ZooKeeperServer) waitReady() error {
	return poll(context.Background(), 60*time.Second, z.p.done, "zookeeper "+z.Addr, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", z.Addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		if _, err := c.Write([]byte("srvr")); err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(c, 4096))
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "Mode: standalone") {
			return fmt.Errorf("srvr answered %q", b)
		}
		return nil
	})
}

// Stop stops the server (SIGTERM); Start starts it again on its data.
func (z *ZooKeeperServer) Stop() { z.p.stop(syscall.SIGTERM, 10*time.Second) }

// Start starts the server again after Stop, on the same port and data.
func (z *ZooKeeperServer) Start() {
	z.t.Helper()
	z.start()
	if err := z.waitReady(); err != nil {
		z.p.failStart(z.t, err)
	}
}
