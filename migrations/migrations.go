// Package migrations owns settle's database schema: the numbered SQL files
// embedded in sql/ and River's own migrations. Under one session advisory
// lock, so that any number of processes may run them at once, the app
// migrations apply in one transaction with their bookkeeping rows, then
// River's apply through rivermigrate, each in transactions of its own (they
// cannot share one). It changes schema, and data only where a migration must
// (0012 binds existing settlements to the bank the operator names, never to
// a guess).
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/settle/settle/settlement"
)

//go:embed sql/*.sql
var files embed.FS

// lockKey is the advisory lock that serialises migrations ("settle" in ASCII).
const lockKey int64 = 0x736574746c65

// Migration is one app schema migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the app migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d", prev, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(files, path.Join("sql", name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Options are what an operator tells a migration run.
type Options struct {
	// BindBank is the bank the settlements already in the database were
	// paid through (`settle migrate --bind-bank NAME`, SETTLE_MIGRATE_BANK):
	// migration 0012 binds them to it and makes it the default of the
	// settlements.bank column. Empty: a database holding settlements is
	// refused (ErrBindBankRequired) rather than guessed at.
	BindBank string
}

// ErrBindBankRequired is returned when migration 0012 would have to bind
// existing settlements to a bank and none was named.
var ErrBindBankRequired = errors.New("settlements exist and no bank was named to bind them to: " +
	"run settle migrate --bind-bank NAME (or set SETTLE_MIGRATE_BANK=NAME) with the bank this deployment paid through " +
	"(settle, stripe or obie: the --bank its workers ran with)")

// bindBankVersion is the migration that binds settlements to a bank.
const bindBankVersion = 12

// ledgerVersion is the migration that creates the ledger, whose own
// accounts are named settle:… (ledger.SystemPrefix).
const ledgerVersion = 15

// ReservedAccountsError is returned when migration 0015 would have to
// open a customer account whose id starts with "settle:", the prefix of
// the ledger's own accounts (settle:funding, settle:clearing:BANK): an
// earlier release's intake accepted such ids, and one could name the same
// account as the ledger's own. Nothing is changed; the operator renames
// the accounts and migrates again.
type ReservedAccountsError struct {
	// Settlements is how many settlements (or ledger movements) pay from
	// such an account, Examples up to five of their account ids.
	Settlements int
	Examples    []string
}

func (e *ReservedAccountsError) Error() string {
	return fmt.Sprintf("migration 0015 (the ledger) cannot open the accounts of %d settlements or ledger movements "+
		"whose account_id starts with \"settle:\", which names the ledger's own accounts from this release on "+
		"(e.g. %s); nothing was changed: rename those accounts in settlements and ledger_movements "+
		"(one transaction, with the trigger ledger_movements_append_only disabled for it) and run settle migrate again",
		e.Settlements, strings.Join(e.Examples, ", "))
}

// reservedAccounts returns a *ReservedAccountsError when settlements or
// ledger movements pay from an account named like the ledger's own.
func reservedAccounts(ctx context.Context, tx pgx.Tx) error {
	const reserved = `SELECT account_id FROM settlements WHERE starts_with(account_id, 'settle:')
		UNION ALL SELECT account_id FROM ledger_movements WHERE starts_with(account_id, 'settle:')`
	var n int
	var examples []string
	if err := tx.QueryRow(ctx, `SELECT count(*), coalesce((array_agg(DISTINCT account_id ORDER BY account_id))[1:5], '{}')
		FROM (`+reserved+`) a`).Scan(&n, &examples); err != nil {
		return fmt.Errorf("error looking for accounts named like the ledger's own: %w", err)
	}
	if n == 0 {
		return nil
	}
	for i, e := range examples {
		examples[i] = strconv.Quote(e)
	}
	return &ReservedAccountsError{Settlements: n, Examples: examples}
}

// Result says what Migrate did.
type Result struct {
	// Applied lists the app migrations applied by this call.
	Applied []string
	// RiverApplied lists River's migration versions applied by this call.
	RiverApplied []int
}

// Migrate brings the app schema and River's schema up to date. It is a
// no-op when both are current, and safe to run from many processes at once:
// the run holds an advisory lock, so a second process waits and then finds
// nothing to do. The pending app migrations are applied in one transaction
// with their bookkeeping rows (all or none); River's follow, outside it.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	return MigrateWith(ctx, pool, Options{})
}

// MigrateWith is Migrate told opts.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, opts Options) (Result, error) {
	var res Result
	if opts.BindBank != "" {
		if err := settlement.CheckBankName(opts.BindBank); err != nil {
			return res, fmt.Errorf("invalid bank to bind settlements to: %w", err)
		}
	}
	ms, err := All()
	if err != nil {
		return res, err
	}
	// River's migrations cannot all share one transaction (a later one uses
	// an enum value an earlier one adds), so the serialisation is a session
	// advisory lock held on a dedicated connection for the whole run.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("error acquiring a connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return res, fmt.Errorf("error taking the migration lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey); err != nil {
			// A lock we cannot release dies with the connection.
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
		}
	}()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS settle_schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("error creating settle_schema_migrations: %w", err)
		}
		rows, err := tx.Query(ctx, "SELECT version FROM settle_schema_migrations")
		if err != nil {
			return fmt.Errorf("error reading applied migrations: %w", err)
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return fmt.Errorf("error reading applied migrations: %w", err)
		}
		applied := map[int]bool{}
		for _, v := range versions {
			applied[v] = true
		}
		// Migration 0012 reads the bank to bind existing settlements to
		// from this transaction's settings (never from its text).
		if _, err := tx.Exec(ctx, "SELECT set_config('settle.bind_bank', $1, true)", opts.BindBank); err != nil {
			return fmt.Errorf("error setting the bank to bind settlements to: %w", err)
		}
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			if m.Version == bindBankVersion && opts.BindBank == "" {
				var any bool
				if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM settlements)").Scan(&any); err != nil {
					return fmt.Errorf("error looking for settlements to bind: %w", err)
				}
				if any {
					return ErrBindBankRequired
				}
			}
			if m.Version == ledgerVersion {
				if err := reservedAccounts(ctx, tx); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("error applying migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO settle_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("error recording migration %s: %w", m.Name, err)
			}
			res.Applied = append(res.Applied, m.Name)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, fmt.Errorf("error creating River migrator: %w", err)
	}
	rres, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return res, fmt.Errorf("error applying River migrations: %w", err)
	}
	for _, v := range rres.Versions {
		res.RiverApplied = append(res.RiverApplied, v.Version)
	}
	return res, nil
}
