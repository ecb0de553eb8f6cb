package inspect

import (
	"encoding/json"
	"fmt"
	"io"
)

// JSONList streams a JSON object that holds one list, however long, one
// item per line: the head fields, the list, then "count". It is the --json
// of `settle reconcile list` and `conflicts`.
type JSONList struct {
	w   io.Writer
	n   int
	err error
}

// NewJSONList starts the object on w with the head fields (name, value
// pairs, in order) and opens the list called list.
func NewJSONList(w io.Writer, list string, head ...any) *JSONList {
	l := &JSONList{w: w}
	l.printf("{")
	for i := 0; i+1 < len(head); i += 2 {
		name, _ := head[i].(string)
		v, err := json.Marshal(head[i+1])
		if err != nil && l.err == nil {
			l.err = err
		}
		l.printf("\n  %q: %s,", name, v)
	}
	l.printf("\n  %q: [", list)
	return l
}

func (l *JSONList) printf(format string, args ...any) {
	if l.err == nil {
		_, l.err = fmt.Fprintf(l.w, format, args...)
	}
}

// Add appends v to the list.
func (l *JSONList) Add(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	sep := ","
	if l.n == 0 {
		sep = ""
	}
	l.n++
	l.printf("%s\n    %s", sep, b)
	return l.err
}

// Close ends the list and the object with the count of items added.
func (l *JSONList) Close() error {
	l.printf("\n  ],\n  \"count\": %d\n}\n", l.n)
	return l.err
}
