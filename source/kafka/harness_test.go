package kafka_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/settle/settle/internal/bintest"
	"github.com/settle/settle/internal/dbtest"
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

// cluster is kfake, an in-process stand-in for Kafka speaking its wire
// protocol (not Kafka: a stand-in), persisting to a directory so it can
// be restarted on what it stored, under the same port.
type cluster struct {
	mu   sync.Mutex
	c    *kfake.Cluster
	dir  string
	port int
	addr string
}

// startCluster starts kfake with the tests' topic, closed when t ends.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{dir: t.TempDir()}
	c.start(t, kfake.SeedTopics(partitions, topic))
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.c.Close()
	})
	return c
}

func (c *cluster) start(t testing.TB, opts ...kfake.Opt) {
	t.Helper()
	kc, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(c.port),
		kfake.DataDir(c.dir),
		kfake.SyncWrites(),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"log.retention.ms": strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10)}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = kc
	c.addr = kc.ListenAddrs()[0]
	_, port, _ := net.SplitHostPort(c.addr)
	c.port, _ = strconv.Atoi(port)
}

// Restart closes the cluster and starts it again on its directory and
// port.
func (c *cluster) Restart(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	c.c.Close()
	c.mu.Unlock()
	c.start(t)
}

// Addr is the broker's HOST:PORT.
func (c *cluster) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// admin returns an admin client of the cluster, closed when t ends.
func (c *cluster) admin(t testing.TB) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// drained reports whether the group committed every partition of the
// topic to its end.
func (c *cluster) drained(adm *kadm.Client, group string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false, err.Error()
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return false, err.Error()
	}
	ok, state := true, ""
	for p := range int32(partitions) {
		end, found := ends.Lookup(topic, p)
		if !found || end.Err != nil {
			return false, fmt.Sprintf("partition %d: no end offset (%v)", p, end.Err)
		}
		var at int64 = -1
		if o, found := committed.Lookup(topic, p); found && o.Err == nil {
			at = o.At
		}
		if end.Offset > 0 && at != end.Offset {
			ok = false
		}
		state += fmt.Sprintf("partition %d: end %d, committed %d; ", p, end.Offset, at)
	}
	return ok, state
}

// kafkaHarness runs the conformance suite on kfake.
type kafkaHarness struct{}

func (kafkaHarness) Kind() string { return kafkasrc.Kind }

func (kafkaHarness) Broker(t *testing.T) sourcetest.Broker {
	c := startCluster(t)
	cl, adm := c.admin(t)
	return &kafkaBroker{c: c, cl: cl, adm: adm, pub: newPublisher(t, c)}
}

// newPublisher returns a publisher to the tests' topic, closed when t ends.
func newPublisher(t testing.TB, c *cluster) *kafkasrc.Publisher {
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
	c   *cluster
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
	return openSource(t, b.c, kafkasrc.Config{Name: o.Name, SessionTimeout: o.Lease, RebalanceTimeout: 10 * time.Second})
}

// openSource opens a source on c's topic with fast fetches, closed when t
// ends.
func openSource(t testing.TB, c *cluster, cfg kafkasrc.Config) *kafkasrc.Source {
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
	return b.c.drained(b.adm, kafkasrc.DefaultGroup)
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
