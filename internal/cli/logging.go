// Package cli is what settle's commands share at the terminal: the slog
// setup behind --log-format, terminal detection, and the one progress bar.
// It holds no business logic.
package cli

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats accepted by --log-format.
const (
	LogFormatAuto = "auto"
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// NewLogger returns a logger writing to w in format: "text", "json", or
// "auto" (text when w is a terminal, JSON otherwise, which is what log
// collectors want). An unknown format is an error.
func NewLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case LogFormatAuto, "":
		if IsTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case LogFormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case LogFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("unknown log format %q (want text, json or auto)", format)
	}
}
