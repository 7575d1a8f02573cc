package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PG is one fresh database, either in a throwaway cluster started by testenv or
// on the server named by DATABASE_URL.
type PG struct {
	// URL is a pgx/libpq URL of the database, e.g.
	// postgres://postgres@127.0.0.1:5433/fg_1a2b?sslmode=disable.
	URL string
	// Database is the name of the database, created for this PG.
	Database string

	cluster *pgCluster // nil for DATABASE_URL
}

// Postgres returns a fresh, empty database. With DATABASE_URL set, it is
// created on that server (and dropped at cleanup). Otherwise it lives in one
// throwaway cluster shared by the whole test binary (initdb into /tmp,
// 127.0.0.1 only, fsync on, max_connections=200), which RunMain stops at
// exit: the package needs a TestMain calling testenv.RunMain.
//
// Stop, Start and Restart on a PG from Postgres act on that shared cluster and
// so on every database of the test binary; tests that crash or stop the
// server must use PostgresIsolated.
func Postgres(t testing.TB) *PG {
	t.Helper()
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return externalDB(t, u)
	}
	atExitMu.Lock()
	ok := mainRunning
	atExitMu.Unlock()
	if !ok {
		t.Fatalf("testenv: Postgres needs func TestMain(m *testing.M) { testenv.RunMain(m) } in this package, so the shared cluster is stopped at exit")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		var c *pgCluster
		c, sharedErr = newCluster(t)
		if sharedErr == nil {
			shared = c
			onExit(c.destroy)
		}
	}
	if sharedErr != nil {
		t.Fatalf("testenv: shared PostgreSQL cluster: %v", sharedErr)
	}
	return shared.createDB(t)
}

// PostgresIsolated returns a fresh database in a cluster of its own, stopped
// and removed at the end of the test. Use it when the test stops, crashes or
// restarts the server. It ignores DATABASE_URL.
func PostgresIsolated(t testing.TB) *PG {
	t.Helper()
	c, err := newCluster(t)
	if err != nil {
		t.Fatalf("testenv: PostgreSQL cluster: %v", err)
	}
	t.Cleanup(c.destroy)
	return c.createDB(t)
}

// Stop shuts the cluster down ("fast" mode: clients disconnected, clean
// checkpoint). See Postgres for what it affects.
func (pg *PG) Stop(t testing.TB) {
	t.Helper()
	pg.mustCluster(t).stop(t, syscall.SIGINT)
}

// Start starts the cluster again on the same port and data directory.
func (pg *PG) Start(t testing.TB) {
	t.Helper()
	c := pg.mustCluster(t)
	if err := c.start(); err != nil {
		t.Fatalf("testenv: restart PostgreSQL: %v", err)
	}
}

// Restart stops and starts the cluster. With immediate, the stop is a crash
// (the "pg_ctl stop -m immediate" signal, SIGQUIT: no checkpoint, WAL recovery
// at start), which is what durability tests want.
func (pg *PG) Restart(t testing.TB, immediate bool) {
	t.Helper()
	c := pg.mustCluster(t)
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	c.stop(t, sig)
	pg.Start(t)
}

func (pg *PG) mustCluster(t testing.TB) *pgCluster {
	t.Helper()
	if pg.cluster == nil {
		t.Fatalf("testenv: cannot stop or start the DATABASE_URL server; use PostgresIsolated")
	}
	return pg.cluster
}

var (
	sharedMu  sync.Mutex
	shared    *pgCluster
	sharedErr error
)

// pgCluster is a postgres server run as a child process, so its exit can be
// awaited and it dies with the test binary.
type pgCluster struct {
	base string // temp dir: data/, socket, postgres.log
	bin  string // directory of initdb and postgres
	port int
	cred *syscall.Credential

	mu   sync.Mutex
	proc *process
}

// pgBinDir finds the PostgreSQL server binaries: the newest
// /usr/lib/postgresql/N/bin (Debian keeps them out of PATH), else PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVer(dirs[i]) > pgVer(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", err
	}
	p, _ = filepath.EvalSymlinks(p)
	return filepath.Dir(p), nil
}

func pgVer(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func newCluster(t testing.TB) (*pgCluster, error) {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		missing(t, "PostgreSQL (initdb)", "run scripts/deps.sh (apt-get install postgresql)")
	}
	sweepOnce.Do(sweepStale)
	c := &pgCluster{bin: bin}
	// initdb refuses to run as root: run the server as the postgres user, in a
	// directory under /tmp that user owns (t.TempDir's parents are root-only).
	var uid, gid int = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			missing(t, "the postgres user", "run scripts/deps.sh (apt-get install postgresql creates it)")
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	c.base, err = os.MkdirTemp("/tmp", "fencegate-pg-")
	if err != nil {
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(c.base, uid, gid); err != nil {
			os.RemoveAll(c.base)
			return nil, err
		}
	}
	initLog := filepath.Join(c.base, "initdb.log")
	p, err := startProcess("initdb", initLog, []string{"LC_ALL=C"}, c.cred, filepath.Join(bin, "initdb"),
		"-D", filepath.Join(c.base, "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if err == nil {
		<-p.done
		err = p.err
	}
	if err != nil {
		msg := tail(initLog, 30)
		os.RemoveAll(c.base)
		return nil, fmt.Errorf("initdb: %v\n%s", err, msg)
	}
	for attempt := 0; ; attempt++ {
		c.port = FreePort(t)
		err = c.start()
		if err == nil {
			return c, nil
		}
		if attempt == 2 {
			c.destroy()
			return nil, err
		}
	}
}

var sweepOnce sync.Once

// sweepStale removes cluster directories left in /tmp by test binaries that
// were killed (go test -timeout, SIGKILL) before RunMain could clean up; their
// servers died with them (Pdeathsig). A directory counts as stale when nothing
// happened in it for 10 minutes and no live postmaster owns it.
func sweepStale() {
	dirs, _ := filepath.Glob("/tmp/fencegate-pg-*")
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil && syscall.Kill(pid, 0) == nil {
				continue
			}
		}
		os.RemoveAll(d)
	}
}

// start runs postgres and waits until it accepts queries.
func (c *pgCluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	logPath := filepath.Join(c.base, "postgres.log")
	p, err := startProcess("postgres", logPath, []string{"LC_ALL=C"}, c.cred, filepath.Join(c.bin, "postgres"),
		"-D", filepath.Join(c.base, "data"),
		"-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+c.base,
		"-c", "fsync=on",
		"-c", "max_connections=200",
		// Statement counts for benchmarks (bench/shared): CREATE EXTENSION
		// pg_stat_statements reads them.
		"-c", "shared_preload_libraries=pg_stat_statements",
	)
	if err != nil {
		return err
	}
	err = poll(context.Background(), 60*time.Second, p.done, "postgres", func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		p.stop(syscall.SIGQUIT, 10*time.Second)
		return fmt.Errorf("%v\n--- last lines of %s ---\n%s", err, logPath, tail(logPath, 30))
	}
	c.proc = p
	return nil
}

// stop signals the postmaster (SIGINT fast, SIGQUIT immediate) and waits.
func (c *pgCluster) stop(t testing.TB, sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		c.proc.stop(sig, 30*time.Second)
		c.proc = nil
	}
}

// destroy stops the server and removes its directory.
func (c *pgCluster) destroy() {
	c.mu.Lock()
	if c.proc != nil {
		c.proc.stop(syscall.SIGQUIT, 30*time.Second)
		c.proc = nil
	}
	c.mu.Unlock()
	os.RemoveAll(c.base)
}

func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func (c *pgCluster) createDB(t testing.TB) *PG {
	t.Helper()
	name := randomDBName()
	if err := createDatabase(c.url("postgres"), name); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return &PG{URL: c.url(name), Database: name, cluster: c}
}

func externalDB(t testing.TB, admin string) *PG {
	t.Helper()
	name := randomDBName()
	if err := createDatabase(admin, name); err != nil {
		t.Fatalf("testenv: DATABASE_URL: %v", err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("testenv: DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	return &PG{URL: u.String(), Database: name}
}

func randomDBName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "fg_" + hex.EncodeToString(b)
}

func createDatabase(adminURL, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	// The name is ours ([a-z0-9_]), so no quoting issue.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
