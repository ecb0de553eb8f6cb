// Package dbtest gives each test its own PostgreSQL database, cloned from a
// migrated template, so tests run in parallel and never see each other's
// rows. With DATABASE_URL unset it starts a private throwaway cluster (the
// same code as settle's embedded default) once per test binary; Main stops
// it, and a watchdog stops it even if the binary is killed.
//
// A test's pool is database.Connect's (settle's limits) on the URL of the
// test's own database: the URL is given, so there is nothing for
// database.Open to decide; the template is prepared over a plain pool.
package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/pgembed"
	"github.com/settle/settle/migrations"
)

var (
	setupOnce sync.Once
	setupErr  error
	adminURL  string
	cluster   *pgembed.Cluster
	home      string
	template  string
	counter   atomic.Int64
	urlOf     func(db string) string
)

// Main runs the tests of a package, then the after functions (for example
// bintest.Cleanup), then stops the private cluster if one was started. Use
// it from TestMain: os.Exit(dbtest.Main(m, bintest.Cleanup)).
func Main(m *testing.M, after ...func()) int {
	code := m.Run()
	for _, f := range after {
		f()
	}
	Shutdown()
	return code
}

// Shutdown stops the private cluster started by this process, if any.
func Shutdown() {
	if cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cluster.Stop(ctx)
		_ = os.RemoveAll(home)
		cluster = nil
	}
}

// AdminURL returns a URL to the maintenance database of the test server,
// starting the private cluster if needed.
func AdminURL(t testing.TB) string {
	t.Helper()
	setup(t)
	return adminURL
}

func setup(t testing.TB) {
	t.Helper()
	setupOnce.Do(func() { setupErr = doSetup() })
	if setupErr != nil {
		t.Fatalf("dbtest: %v", setupErr)
	}
}

func doSetup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv("DATABASE_URL"); u != "" {
		if _, err := pgx.ParseConfig(u); err != nil {
			return fmt.Errorf("error parsing DATABASE_URL: %w", err)
		}
		adminURL = u
		urlOf = func(db string) string { return database.WithDB(u, db) }
	} else {
		var err error
		home, err = os.MkdirTemp("", "settle-test-")
		if err != nil {
			return err
		}
		// The server may run as another user (as root: postgres); it must
		// be able to reach its directory.
		if err := os.Chmod(home, 0o711); err != nil {
			return err
		}
		cluster, err = pgembed.Ensure(ctx, pgembed.Options{Home: home, Ephemeral: true})
		if err != nil {
			os.RemoveAll(home)
			return err
		}
		adminURL = cluster.URL("postgres")
		urlOf = cluster.URL
	}
	return makeTemplate(ctx)
}

// TestBank is the bank of the settlements a test inserts without naming
// one: the default of settlements.bank in every test database.
const TestBank = "settle"

// makeTemplate creates the migrated template database, named after a hash
// of the migrations so a changed schema gets a new template, under an
// advisory lock so concurrent test binaries sharing a server cooperate.
func makeTemplate(ctx context.Context) error {
	ms, err := migrations.All()
	if err != nil {
		return err
	}
	h := sha256.New()
	for _, m := range ms {
		h.Write([]byte(m.SQL))
	}
	h.Write([]byte("bind_bank=" + TestBank))
	template = "settle_tpl_" + hex.EncodeToString(h.Sum(nil))[:12]
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("error connecting to the test server: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7357)"); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7357)") //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", template).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{template}.Sanitize()); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("error creating the template database: %w", err)
	}
	pool, err := pgxpool.New(ctx, urlOf(template))
	if err != nil {
		return err
	}
	// Bound to the default connector: settlements a test inserts by hand,
	// naming no bank, belong to settle's (the column's default), as
	// they did before settlements had banks.
	_, err = migrations.MigrateWith(ctx, pool, migrations.Options{BindBank: TestBank})
	pool.Close()
	if err != nil {
		return fmt.Errorf("error migrating the template database: %w", err)
	}
	_, err = conn.Exec(ctx, "UPDATE pg_database SET datistemplate = true WHERE datname = $1", template)
	return err
}

// DB is one test's private, migrated database.
type DB struct {
	Name string
	// URL connects to it; hand it to subprocesses as DATABASE_URL.
	URL  string
	Pool *pgxpool.Pool
}

// New creates a fresh migrated database for t and drops it when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	setup(t)
	return create(t, template)
}

// NewEmpty creates a fresh database with no schema at all, for tests of
// the migrations themselves, and drops it when t ends.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	setup(t)
	return create(t, "template0")
}

func create(t testing.TB, template string) *DB {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), counter.Add(1))
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("dbtest: error connecting: %v", err)
	}
	defer conn.Close(ctx)
	// Two CREATE DATABASE from one template at once collide on it: the
	// second fails with object_in_use (55006) while the first copies it.
	// That, and only that, is retried, after a short pause.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
		var pgErr *pgconn.PgError
		if err == nil || attempt == 100 || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dbtest: error creating database %s: %v", name, err)
	}
	db := &DB{Name: name, URL: urlOf(name)}
	db.Pool, err = database.Connect(ctx, db.URL, database.PoolOptions{MaxConns: 20, ApplicationName: "settle-test"})
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		db.Pool.Close()
		c, err := pgx.Connect(context.Background(), adminURL)
		if err != nil {
			t.Logf("dbtest: error connecting to drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("dbtest: error dropping %s: %v", name, err)
		}
	})
	return db
}
