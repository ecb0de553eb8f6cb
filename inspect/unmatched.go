package inspect

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// LineCursor is a position in the list of unmatched statement lines:
// newest statement first, then by the line's place in it, backwards.
type LineCursor struct {
	StatementID       int64
	Position, TxIndex int
}

// IsZero reports whether c is the start of the list.
func (c LineCursor) IsZero() bool { return c == LineCursor{} }

// String encodes c for a URL ("" for the start).
func (c LineCursor) String() string {
	if c.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", c.StatementID, c.Position, c.TxIndex)
}

// ParseLineCursor decodes LineCursor.String.
func ParseLineCursor(s string) (LineCursor, error) {
	if s == "" {
		return LineCursor{}, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) == 3 {
		sid, err1 := strconv.ParseInt(parts[0], 10, 64)
		pos, err2 := strconv.ParseInt(parts[1], 10, 32)
		txi, err3 := strconv.ParseInt(parts[2], 10, 32)
		if err1 == nil && err2 == nil && err3 == nil && sid >= 1 && pos >= 1 && txi >= 1 {
			return LineCursor{StatementID: sid, Position: int(pos), TxIndex: int(txi)}, nil
		}
	}
	return LineCursor{}, fmt.Errorf("malformed cursor %q", s)
}

// LinePage is one page of unmatched statement lines.
type LinePage struct {
	// Available is false when this database has no statement tables.
	Available bool
	Lines     []StatementLine
	// Next continues after the last line; zero on the last page.
	Next LineCursor
}

// UnmatchedLines reads at most limit statement lines matched to no
// settlement (a suggestion is not a match) after cursor after, newest
// statement first, keyset on the index of the unmatched lines.
func (i *Inspector) UnmatchedLines(ctx context.Context, after LineCursor, limit int) (LinePage, error) {
	if limit <= 0 || limit > maxPageSize {
		limit = maxPageSize
	}
	var p LinePage
	var cursors []LineCursor
	err := i.readTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT to_regclass('bank_statement_entries') IS NOT NULL`).Scan(&p.Available); err != nil || !p.Available {
			return err
		}
		// The first page starts past every real line.
		from := after
		if from.IsZero() {
			from = LineCursor{StatementID: 1<<63 - 1}
		}
		rows, err := tx.Query(ctx, LineSelect+`, e.statement_id
			FROM bank_statement_entries e
			JOIN bank_statements st ON st.id = e.statement_id
			JOIN bank_statement_files f ON f.id = st.file_id
			WHERE e.settlement_id IS NULL AND (e.statement_id, e.position, e.tx_index) < ($1, $2, $3)
			ORDER BY e.statement_id DESC, e.position DESC, e.tx_index DESC
			LIMIT $4`, from.StatementID, from.Position, from.TxIndex, limit+1)
		if err != nil {
			return err
		}
		var (
			l   StatementLine
			sid int64
		)
		_, err = pgx.ForEachRow(rows, append(l.scanTargets(), &sid), func() error {
			p.Lines = append(p.Lines, l)
			cursors = append(cursors, LineCursor{StatementID: sid, Position: l.Position, TxIndex: l.TxIndex})
			return nil
		})
		return err
	})
	if err != nil {
		return LinePage{}, fmt.Errorf("error reading unmatched statement lines: %w", err)
	}
	if len(p.Lines) > limit {
		p.Lines = p.Lines[:limit]
		p.Next = cursors[limit-1]
	}
	return p, nil
}
