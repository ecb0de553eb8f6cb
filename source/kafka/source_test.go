package kafka_test

import (
	"testing"

	"github.com/settle/settle/source/sourcetest"
)

// TestConformance runs the sources' conformance suite on kfake, the
// in-process stand-in for Kafka.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, kafkaHarness{})
}
