// Package postgres is fencegate's PostgreSQL store: the connection pool and
// the versioned schema migrations shared by the fence (fence_*.go: records,
// the local and the shared fence's markers, resets), the lease coordinator
// (lease.go), ETag records (etag.go), recovery (recovery.go) and the ACME
// certificate storage that replicas share (certstore.go).
package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
)

// Store is a pool of connections to one PostgreSQL database.
type Store struct {
	Pool *pgxpool.Pool
	// Timeout bounds one statement and its lock waits.
	Timeout time.Duration

	guard     *Guard
	watchStop chan struct{}
	watchOnce sync.Once
	watchWG   sync.WaitGroup
}

// Options tune Open.
type Options struct {
	MaxConns int32         // 0: pgx's default
	Timeout  time.Duration // statement and lock timeout; 0: 5s
	// SkipMigrate leaves the schema as it is (fencegate migrate applies it).
	SkipMigrate bool
	// Logger receives the store guard's findings (guard.go). Nil:
	// slog.Default().
	Logger *slog.Logger
	// AutoRecover makes the store guard run the recovery (Recover with
	// its defaults) itself when it finds the store went back, instead of
	// refusing until an operator does (store.postgres.on_regression).
	AutoRecover bool
	// Foreign is the automatic recovery's RecoverOptions.Foreign.
	Foreign func(resource string) bool
}

// Open connects to url and applies pending migrations. The database being
// down at start is not an error: the pool connects lazily and every request
// is refused with 503 until it is back (fail closed), unless migrations are
// pending, which need the database now.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = fencegate.DefaultStoreTimeout
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	if opts.MaxConns > 0 {
		pc.MaxConns = opts.MaxConns
	}
	pc.ConnConfig.ConnectTimeout = opts.Timeout
	rp := pc.ConnConfig.RuntimeParams
	ms := strconv.FormatInt(opts.Timeout.Milliseconds(), 10)
	rp["lock_timeout"] = ms
	rp["statement_timeout"] = ms
	if rp["application_name"] == "" {
		// A URL's own application_name is kept, so an operator can tell
		// replicas apart in pg_stat_activity.
		rp["application_name"] = "fencegate"
	}
	// The shared fence's decisions rely on a fresh snapshot per statement,
	// whatever the server's or role's default isolation level.
	rp["default_transaction_isolation"] = "read committed"
	// Advances and issued tokens must be durable before they are acted on
	// (I3, I5), whatever the database's default; the in-flight marker of
	// the shared fence turns it off for itself with SET LOCAL.
	rp["synchronous_commit"] = "on"
	// Every connection, pooled or dedicated (marker sessions, LISTEN), is
	// checked by the store guard before it is used: one that reached a
	// promoted standby (a multi-host URL follows a promotion) lets no
	// write through before the guard has looked at the new primary.
	g := newGuard(opts.Logger)
	prev := pc.ConnConfig.AfterConnect
	pc.ConnConfig.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, c); err != nil {
				return err
			}
		}
		return g.check(ctx, c)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	s := &Store{Pool: pool, Timeout: opts.Timeout, guard: g, watchStop: make(chan struct{})}
	g.recordFn = func(ctx context.Context, cause string) error {
		_, err := s.Pool.Exec(ctx, metaSetSQL, "regressed", cause)
		return err
	}
	if opts.AutoRecover {
		g.autoRecover = func(ctx context.Context) error {
			res, err := s.Recover(ctx, RecoverOptions{By: "fencegate (store.postgres.on_regression: recover)", Foreign: opts.Foreign})
			if err == nil {
				g.log.Warn("store recovered automatically (store.postgres.on_regression: recover)", "token_floor", res.TokenFloor, "leases_ended", res.LeasesEnded)
				err = s.CheckStore(ctx)
			}
			return err
		}
	}
	if !opts.SkipMigrate {
		if err := s.Migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	g.armed.Store(true)
	// The connections the migration opened were not checked; a database
	// down now is checked on the first connection it accepts.
	s.CheckStore(ctx)
	return s, nil
}

// Guard returns the store guard (guard.go).
func (s *Store) Guard() *Guard { return s.guard }

// CheckStore runs the store guard's check now, on a pooled connection.
func (s *Store) CheckStore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	c, err := s.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return s.guard.check(ctx, c.Conn().PgConn())
}

// Watch runs the store guard's check every interval until Close: it finds
// a regression another process recorded, a recovery, and changes of the
// primary's replication. A database that does not answer is not an error
// here (the requests report it).
func (s *Store) Watch(interval time.Duration) {
	s.watchWG.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.CheckStore(context.Background())
			select {
			case <-s.watchStop:
				return
			case <-t.C:
			}
		}
	})
}

// Close closes the pool.
func (s *Store) Close() error {
	s.watchOnce.Do(func() {
		if s.watchStop != nil {
			close(s.watchStop)
		}
	})
	s.watchWG.Wait()
	s.Pool.Close()
	return nil
}

// Ping reports whether the database answers and the store is served (not
// found gone back).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	if err := s.guard.Err(""); err != nil {
		return err
	}
	return s.Pool.Ping(ctx)
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		// Files are named NNN_description.sql; NNN is the version.
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a version number", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share a version", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// migrateLock is the advisory lock key that serializes migrations of several
// replicas starting at once.
const migrateLock = 0x66656e6365 // "fence"

// Migrate applies pending migrations, each in its own transaction, and
// returns the versions applied.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()
	// Migrations may take longer than one request's statement timeout.
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0; SET lock_timeout = '60s'"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLock); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrateLock)
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS fencegate_schema_migrations (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM fencegate_schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, v := range vs {
		applied[int(v)] = true
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO fencegate_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}
