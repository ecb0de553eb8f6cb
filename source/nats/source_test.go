package nats_test

import (
	"testing"

	"github.com/settle/settle/source"
	"github.com/settle/settle/source/sourcetest"
)

// TestConformance runs the sources' conformance suite on JetStream.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, natsHarness{})
}

// TestNewLoopNeedsSourceAndIntake checks the loop's required settings.
func TestNewLoopNeedsSourceAndIntake(t *testing.T) {
	t.Parallel()
	if _, err := source.NewLoop(source.Config{}); err == nil {
		t.Fatal("NewLoop without Source and Intake: no error")
	}
}
