package testenv

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby starts a streaming standby of pg's cluster (which must be
// PostgresIsolated): a base backup taken with `pg_basebackup -R` (so the
// standby streams the primary's WAL from the address it was taken from),
// from via (host:port, e.g. a toxiproxy in front of the primary; "" for
// the primary itself), started on a port of its own and removed at the end
// of the test. Its URL names pg's database.
func (pg *PG) Standby(t testing.TB, via string) *PG {
	t.Helper()
	p := pg.mustCluster(t)
	if via == "" {
		via = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	}
	host, port, err := net.SplitHostPort(via)
	if err != nil {
		t.Fatalf("testenv: standby: %v", err)
	}
	c := &pgCluster{bin: p.bin, cred: p.cred}
	if c.base, err = os.MkdirTemp("/tmp", "fencegate-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.destroy)
	if c.cred != nil {
		if err := os.Chown(c.base, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(c.base, "basebackup.log")
	bb, err := startProcess("pg_basebackup", logPath, []string{"LC_ALL=C"}, c.cred, filepath.Join(c.bin, "pg_basebackup"),
		"-D", filepath.Join(c.base, "data"), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
		"-h", host, "-p", port, "-U", "postgres")
	if err == nil {
		<-bb.done
		err = bb.err
	}
	if err != nil {
		t.Fatalf("testenv: pg_basebackup: %v\n%s", err, tail(logPath, 30))
	}
	for attempt := 0; ; attempt++ {
		c.port = FreePort(t)
		if err = c.start(); err == nil {
			break
		}
		if attempt == 2 {
			t.Fatalf("testenv: standby: %v", err)
		}
	}
	return &PG{URL: c.url(pg.Database), Database: pg.Database, cluster: c}
}

// Addr is the host:port the cluster listens on.
func (pg *PG) Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.mustCluster(t).port))
}

// Crash stops the cluster as `pg_ctl stop -m immediate` does (SIGQUIT: no
// checkpoint, clients cut) and leaves it down.
func (pg *PG) Crash(t testing.TB) {
	t.Helper()
	pg.mustCluster(t).stop(t, syscall.SIGQUIT)
}

// Promote makes a standby a primary (pg_promote, waiting for it) on a new
// timeline.
func (pg *PG) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatalf("testenv: promote: %v", err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil || !ok {
		t.Fatalf("testenv: promote: %v (promoted: %v)", err, ok)
	}
}

// Exec runs sql on the cluster's "postgres" database (settings such as
// ALTER SYSTEM, which then need SELECT pg_reload_conf()).
func (pg *PG) Exec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.mustCluster(t).url("postgres"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("testenv: %s: %v", sql, err)
	}
}
