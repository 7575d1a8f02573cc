package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer starts Debian's pgbouncer in front of pg's server with the
// given pool_mode (session, transaction or statement), stopped at the end
// of the test, and returns the URL of pg's database through it.
//
// fencegate's startup parameters other than application_name are listed in
// ignore_startup_parameters (PgBouncer refuses unknown ones), so behind
// this pooler they are not applied: the server's defaults hold.
func PgBouncer(t testing.TB, pg *PG, mode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			missing(t, "pgbouncer", "run scripts/deps.sh (apt-get install pgbouncer)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	u, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatalf("testenv: pgbouncer: %v", err)
	}
	// PgBouncer refuses to run as root: run it as the postgres user, in a
	// directory that user owns.
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("/tmp", "fencegate-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		pu, err := user.Lookup("postgres")
		if err != nil {
			missing(t, "the postgres user", "run scripts/deps.sh")
		}
		uid, _ := strconv.Atoi(pu.Uid)
		gid, _ := strconv.Atoi(pu.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	pgUser := u.User.Username()
	log := filepath.Join(dir, "pgbouncer.log")
	for attempt := 0; ; attempt++ {
		port := FreePort(t)
		ini := filepath.Join(dir, "pgbouncer.ini")
		conf := fmt.Sprintf(`[databases]
* = host=%s port=%s user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
max_client_conn = 2000
default_pool_size = 100
server_round_robin = 0
ignore_startup_parameters = extra_float_digits,lock_timeout,statement_timeout,synchronous_commit,default_transaction_isolation
logfile = %s
`, u.Hostname(), u.Port(), pgUser, port, mode, log)
		if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := startProcess("pgbouncer", filepath.Join(dir, "stdout.log"), nil, cred, bin, ini)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		bu := *u
		bu.Host = "127.0.0.1:" + strconv.Itoa(port)
		q := bu.Query()
		q.Set("sslmode", "disable")
		bu.RawQuery = q.Encode()
		err = poll(context.Background(), 20*time.Second, p.done, "pgbouncer", func(ctx context.Context) error {
			conn, err := pgx.Connect(ctx, bu.String())
			if err != nil {
				return err
			}
			return conn.Close(ctx)
		})
		if err == nil {
			p.cleanup(t, syscall.SIGTERM)
			return bu.String()
		}
		if attempt == 2 || !p.exited() {
			p.stop(syscall.SIGKILL, 5*time.Second)
			t.Fatalf("testenv: pgbouncer did not start: %v\n%s\n%s", err, tail(log, 20), tail(filepath.Join(dir, "stdout.log"), 20))
		}
	}
}
