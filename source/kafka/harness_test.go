package kafka_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/settle/settle/internal/testsupport/bintest"
	"github.com/settle/settle/internal/testsupport/dbtest"
	"github.com/settle/settle/internal/testsupport/kafkatest"
	"github.com/settle/settle/source"
	kafkasrc "github.com/settle/settle/source/kafka"
	"github.com/settle/settle/source/sourcetest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m, bintest.Cleanup)) }

// The topic of the tests: three partitions, so two consumers share the
// work and a rebalance moves partitions.
const (
	topic      = "settle.requests"
	partitions = 3
)

// startCluster starts kfake (internal/testsupport/kafkatest) with the tests' topic.
func startCluster(t testing.TB) *kafkatest.Cluster {
	t.Helper()
	return kafkatest.Start(t, partitions, topic)
}

// kafkaHarness runs the conformance suite on kfake.
type kafkaHarness struct{}

func (kafkaHarness) Kind() string { return kafkasrc.Kind }

func (kafkaHarness) Broker(t *testing.T) sourcetest.Broker {
	c := startCluster(t)
	cl, adm := c.Client(t)
	return &kafkaBroker{c: c, cl: cl, adm: adm, pub: newPublisher(t, c)}
}

// newPublisher returns a publisher to the tests' topic, closed when t ends.
func newPublisher(t testing.TB, c *kafkatest.Cluster) *kafkasrc.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub, err := kafkasrc.NewPublisher(ctx, []string{c.Addr()}, topic, "settle-test-publisher")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return pub
}

// kafkaBroker is one case's kfake cluster.
type kafkaBroker struct {
	c   *kafkatest.Cluster
	cl  *kgo.Client
	adm *kadm.Client
	pub *kafkasrc.Publisher
}

// Publish produces data keyed by its settlement_id, as settle submit
// does.
func (b *kafkaBroker) Publish(t *testing.T, data []byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := b.pub.PublishEvent(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	return p.TransportID(topic)
}

func (b *kafkaBroker) Open(t *testing.T, o sourcetest.Options) source.Source {
	t.Helper()
	// The session is at least 2 s: a lapsed session is what Expire does,
	// and heartbeats a third of a shorter one apart could be late on a
	// loaded machine.
	return openSource(t, b.c, kafkasrc.Config{Name: o.Name, SessionTimeout: max(o.Lease, 2*time.Second), RebalanceTimeout: 10 * time.Second})
}

// openSource opens a source on c's topic with fast fetches, closed when t
// ends.
func openSource(t testing.TB, c *kafkatest.Cluster, cfg kafkasrc.Config) *kafkasrc.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Brokers, cfg.Topic = []string{c.Addr()}, topic
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 200 * time.Millisecond
	}
	src, err := kafkasrc.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func (b *kafkaBroker) Drained(*testing.T) (bool, string) {
	return kafkatest.Drained(b.adm, kafkasrc.DefaultGroup, topic)
}

// Expire puts src's member out of the group, as the coordinator does when
// its session runs out (its heartbeats stopped: a stalled or cut-off
// worker): its partitions go to the other members, and what it commits
// afterwards under its old membership is refused.
func (b *kafkaBroker) Expire(t *testing.T, src source.Source) {
	t.Helper()
	ks := src.(*kafkasrc.Source)
	member, _ := ks.Client().GroupMetadata()
	if member == "" {
		t.Fatal("the consumer holds no group membership to expire")
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = ks.Group()
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = member
	req.Members = append(req.Members, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, b.cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || len(resp.Members) != 1 || resp.Members[0].ErrorCode != 0 {
		t.Fatalf("putting member %s out of the group: %+v", member, resp)
	}
}

func (b *kafkaBroker) Restart(t *testing.T) error {
	b.c.Restart(t)
	return nil
}
