// Package kafkatest gives tests kfake (github.com/twmb/franz-go/pkg/kfake),
// an in-process stand-in for Kafka that speaks its wire protocol, from the
// authors of the client settle uses. It is a stand-in, not Kafka: what it
// proves is the client's and settle's side of the protocol. The cluster
// persists to a private directory so a test can restart it on what it
// stored, under the same port. Never imported by non-test code.
package kafkatest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Retention is the retention.ms of the cluster's topics.
const Retention = 7 * 24 * time.Hour

// Cluster is a one-broker kfake cluster.
type Cluster struct {
	mu   sync.Mutex
	c    *kfake.Cluster
	dir  string
	port int
	addr string
}

// Start starts a cluster holding topics, each with partitions partitions,
// closed when t ends. Nothing else is created: kfake, like Kafka, creates
// no topic by itself unless asked.
func Start(t testing.TB, partitions int32, topics ...string) *Cluster {
	t.Helper()
	c := &Cluster{dir: t.TempDir()}
	var opts []kfake.Opt
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c.start(t, opts...)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.c.Close()
	})
	return c
}

func (c *Cluster) start(t testing.TB, opts ...kfake.Opt) {
	t.Helper()
	kc, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(c.port),
		kfake.DataDir(c.dir),
		kfake.SyncWrites(),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"log.retention.ms": strconv.FormatInt(Retention.Milliseconds(), 10)}),
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
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	c.c.Close()
	c.mu.Unlock()
	c.start(t)
}

// Addr is the broker's HOST:PORT.
func (c *Cluster) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// Spec is the source SPEC of topic on the cluster.
func (c *Cluster) Spec(topic string) string { return "kafka://" + c.Addr() + "/" + topic }

// Client returns a client of the cluster and its admin client, closed
// when t ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addr())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// Drained reports whether group committed every partition of topic that
// holds records to its end, and otherwise says what is left.
func Drained(adm *kadm.Client, group, topic string) (bool, string) {
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
	ends.Each(func(end kadm.ListedOffset) {
		if end.Err != nil {
			ok = false
			state += fmt.Sprintf("partition %d: %v; ", end.Partition, end.Err)
			return
		}
		var at int64 = -1
		if o, found := committed.Lookup(topic, end.Partition); found && o.Err == nil {
			at = o.At
		}
		if end.Offset > 0 && at != end.Offset {
			ok = false
		}
		state += fmt.Sprintf("partition %d: end %d, committed %d; ", end.Partition, end.Offset, at)
	})
	return ok, state
}

// Records reads every record of topic, partition by partition, each in
// offset order.
func Records(t testing.TB, c *Cluster, topic string) []*kgo.Record {
	t.Helper()
	_, adm := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	ends.Each(func(o kadm.ListedOffset) { want += int(o.Offset) })
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addr()), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %d of %d records after a minute", topic, len(out), want)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("reading %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	return out
}
