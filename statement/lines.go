package statement

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxLine bounds a physical line of the line formats (BAI2, MT940), so
// that one endless line cannot grow the buffer: SWIFT lines are 65
// characters and BAI2 records a few hundred, and a whole small BAI2 file
// written as one line still fits.
const maxLine = 1 << 20

// maxRecord bounds a logical record of the line formats: an MT940 field
// with its continuation lines, a BAI2 record with its continuations (88
// records, or lines it runs on over). A SWIFT :86: is at most 6 lines of
// 65 characters and a BAI2 record a few hundred bytes; endless
// continuations are refused, not gathered.
const maxRecord = 256 << 10

// lineReader yields the physical lines of a text file with their 1-based
// numbers. Lines end at \n, \r\n or a lone \r; the end is not part of the
// line.
type lineReader struct {
	sc   *bufio.Scanner
	line int
}

func newLineReader(r io.Reader) *lineReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	sc.Split(splitLines)
	return &lineReader{sc: sc}
}

// next returns the next line, valid until the following call, or io.EOF.
func (l *lineReader) next() ([]byte, error) {
	if !l.sc.Scan() {
		err := l.sc.Err()
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, errorf(ErrMalformed, "line %d is longer than %d bytes", l.line+1, maxLine)
		}
		if err == nil {
			err = io.EOF
		}
		return nil, err
	}
	l.line++
	return l.sc.Bytes(), nil
}

// splitLines is a bufio.SplitFunc for lines ended by \n, \r\n or \r.
func splitLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a \r at the end of the buffer: is \n next?
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
