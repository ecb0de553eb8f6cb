package fakebank_test

import (
	"testing"

	"github.com/settle/settle/fakebank"
	"github.com/settle/settle/fakebank/conformance"
	"github.com/settle/settle/fakebank/fakebanktest"
)

func TestConformanceInProcess(t *testing.T) {
	t.Parallel()
	_, url := fakebanktest.NewServer(t, fakebank.Options{Seed: 1})
	conformance.Run(t, url)
}

func TestConformanceOnRealListener(t *testing.T) {
	t.Parallel()
	b, err := fakebank.New(fakebank.Options{Seed: 2, StatePath: t.TempDir() + "/state.json"})
	if err != nil {
		t.Fatal(err)
	}
	url, err := b.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	conformance.Run(t, url)
}
