package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// RiverUIPrefix is the path under which the worker serves the River UI.
const RiverUIPrefix = "/riverui/"

// riverUI returns the River UI (jobs, queues, retries of settle's River
// client) as a handler to mount at RiverUIPrefix. It starts the UI's
// background services, which stop when ctx ends. The client need not be
// started; the UI only reads and administers River's tables.
func riverUI(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger) (http.Handler, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger.With("component", "riverui"),
		Prefix:    RiverUIPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating the River UI handler: %w", err)
	}
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("error starting the River UI: %w", err)
	}
	return h, nil
}
