package main

import (
	"bytes"
	"os"
	"testing"
)

// TestDecisionTableCurrent fails when model/decisions.pml is not what the
// decision functions decide today: a decision changed without the model, or
// the file was edited by hand.
func TestDecisionTableCurrent(t *testing.T) {
	t.Parallel()
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../decisions.pml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range max(len(gl), len(wl)) {
			var g, w []byte
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if !bytes.Equal(g, w) {
				t.Fatalf("model/decisions.pml is stale (first difference at line %d):\n have: %s\n want: %s\nrun `go generate ./model` and check the model again (go test ./model)", i+1, g, w)
			}
		}
	}
}
