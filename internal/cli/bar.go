package cli

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// IsTerminal reports whether w is an *os.File connected to a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Bar is the one progress bar of settle's commands: a count of total
// (a spinner with a count when total is negative), drawn on w only when w
// is a terminal. A nil *Bar, which NewBar returns otherwise, does nothing.
type Bar struct{ pb *progressbar.ProgressBar }

// NewBar returns a bar described as what, or nil when w is not a terminal.
func NewBar(w io.Writer, total int64, what string) *Bar {
	if !IsTerminal(w) {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
	}
	if total < 0 {
		opts = append(opts, progressbar.OptionSpinnerType(14), progressbar.OptionUseANSICodes(true))
	}
	return &Bar{progressbar.NewOptions64(total, opts...)}
}

// Add moves the bar n steps.
func (b *Bar) Add(n int) {
	if b != nil {
		_ = b.pb.Add(n)
	}
}

// Set moves the bar to n.
func (b *Bar) Set(n int64) {
	if b != nil {
		_ = b.pb.Set64(n)
	}
}

// Finish completes the bar and clears it (a spinner, which never
// completes, is cleared).
func (b *Bar) Finish() {
	if b != nil {
		_ = b.pb.Finish()
		_ = b.pb.Clear()
	}
}
