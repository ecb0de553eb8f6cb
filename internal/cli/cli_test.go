package cli_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/settle/settle/internal/cli"
)

func TestNewLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := cli.NewLogger(&buf, cli.LogFormatAuto, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("decided", "settlement_id", "s1")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("auto on a non-terminal wrote %q, want JSON", buf.String())
	}
	buf.Reset()
	l, _ = cli.NewLogger(&buf, cli.LogFormatText, slog.LevelInfo)
	l.Info("decided", "settlement_id", "s1")
	if !strings.Contains(buf.String(), "settlement_id=s1") {
		t.Errorf("text wrote %q", buf.String())
	}
	if _, err := cli.NewLogger(&buf, "xml", slog.LevelInfo); err == nil {
		t.Error("NewLogger accepted format xml")
	}
}
