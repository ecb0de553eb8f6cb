package loadtest

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/settle/settle/internal/database"
	"github.com/settle/settle/internal/pgembed"
)

// Cluster is a private, restartable PostgreSQL cluster holding one
// database named "settle". Its URL stays valid across restarts: the server
// comes back on the same port and socket.
type Cluster struct {
	pg   *pgembed.Cluster
	home string
	// URL connects to the settle database; hand it to workers as DATABASE_URL.
	URL string
	// AdminURL connects to the maintenance database.
	AdminURL string
}

// StartCluster creates and starts a throwaway cluster under a new
// directory in os.TempDir(). Call Close when done; a watchdog stops it
// anyway when the calling process exits.
func StartCluster(ctx context.Context) (*Cluster, error) {
	home, err := os.MkdirTemp("", "settle-fault-")
	if err != nil {
		return nil, err
	}
	// The server may run as another user (as root: postgres).
	if err := os.Chmod(home, 0o711); err != nil {
		_ = os.RemoveAll(home)
		return nil, err
	}
	pg, err := pgembed.Ensure(ctx, pgembed.Options{Home: home, Ephemeral: true})
	if err != nil {
		_ = os.RemoveAll(home)
		return nil, err
	}
	c := &Cluster{pg: pg, home: home, URL: pg.URL(database.DefaultDBName), AdminURL: pg.URL("postgres")}
	if err := database.CreateDatabase(ctx, c.AdminURL, database.DefaultDBName, ""); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Stop stops the server: a fast shutdown (sessions are disconnected, the
// server checkpoints) or an immediate one (every server process quits at
// once, as in a crash; the next start runs crash recovery).
func (c *Cluster) Stop(ctx context.Context, immediate bool) error {
	if immediate {
		return c.pg.StopImmediate(ctx)
	}
	return c.pg.Stop(ctx)
}

// Start starts the stopped server again on the same port.
func (c *Cluster) Start(ctx context.Context) error {
	pg, err := pgembed.Ensure(ctx, pgembed.Options{Home: c.home, Ephemeral: true, Port: c.pg.Port})
	if err != nil {
		return fmt.Errorf("error restarting PostgreSQL: %w", err)
	}
	if pg.URL(database.DefaultDBName) != c.URL {
		return fmt.Errorf("PostgreSQL restarted on another address: %s, want %s", pg.URL(database.DefaultDBName), c.URL)
	}
	c.pg = pg
	return nil
}

// Close stops the server, if it runs, and removes its directory.
func (c *Cluster) Close() error {
	ctx := context.Background()
	var err error
	if _, running, ferr := pgembed.Find(c.home); ferr == nil && running {
		err = c.pg.StopImmediate(ctx)
	}
	return errors.Join(err, os.RemoveAll(c.home))
}
