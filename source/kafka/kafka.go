// Package kafka is the Kafka adapter of the event sources (DESIGN.md
// section 18): a member of a consumer group (default settle-intake) on one
// topic, with the client's auto-commit off. A partition's offset is
// committed only up to the last record whose outcome has committed in the
// database, and a rebalance waits for the batch in work (the client's
// BlockRebalanceOnPoll), so a revoked partition is handed over with its
// offset committed exactly as far as its outcomes. The engine loop (package
// source) drives it.
//
// It never creates a topic: the topic must exist (with the partitions and
// retention its operator chose), and Open and NewPublisher say so when it
// does not. It never logs a credential.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/settle/settle/source"
)

// Kind is the source kind of Kafka in intake_rejects and the metrics.
const Kind = "kafka"

// Defaults of Config.
const (
	// DefaultGroup is the consumer group every worker joins.
	DefaultGroup = "settle-intake"
	// DefaultSessionTimeout is how long a member stays in the group
	// without a heartbeat (the client heartbeats in the background,
	// whatever the batch in work).
	DefaultSessionTimeout = 45 * time.Second
	// DefaultRebalanceTimeout is how long a rebalance waits for the batch
	// in work to be finished and its offsets committed; a member that
	// takes longer is put out of the group, and its records go to another
	// member, which records them again (replays).
	DefaultRebalanceTimeout = time.Minute
	// DefaultFetchWait is how long a fetch waits for the first record.
	DefaultFetchWait = time.Second
)

// Spec is a parsed kafka:// source SPEC.
type Spec struct {
	// Brokers are the seed brokers, HOST:PORT each.
	Brokers []string
	// Topic is the topic.
	Topic string
	// Group is the consumer group (DefaultGroup when the SPEC names none).
	Group string
}

// String is the SPEC again.
func (s Spec) String() string {
	out := "kafka://" + strings.Join(s.Brokers, ",") + "/" + s.Topic
	if s.Group != DefaultGroup {
		out += "?group=" + url.QueryEscape(s.Group)
	}
	return out
}

// ParseSpec parses kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G].
func ParseSpec(spec string) (Spec, error) {
	rest, ok := strings.CutPrefix(spec, "kafka://")
	if !ok {
		return Spec{}, fmt.Errorf("kafka source %q: want kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G]", spec)
	}
	hosts, path, ok := strings.Cut(rest, "/")
	if !ok {
		return Spec{}, fmt.Errorf("kafka source %q: no /TOPIC", spec)
	}
	topic, query, _ := strings.Cut(path, "?")
	out := Spec{Topic: topic, Group: DefaultGroup}
	if err := checkTopic(topic); err != nil {
		return Spec{}, fmt.Errorf("kafka source %q: %w", spec, err)
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return Spec{}, fmt.Errorf("kafka source %q: broker %q is not HOST:PORT", spec, h)
		}
		out.Brokers = append(out.Brokers, h)
	}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return Spec{}, fmt.Errorf("kafka source %q: %w", spec, err)
		}
		for k := range q {
			if k != "group" {
				return Spec{}, fmt.Errorf("kafka source %q: unknown parameter %q (want group)", spec, k)
			}
		}
		if g := q.Get("group"); g != "" {
			out.Group = g
		} else if q.Has("group") {
			return Spec{}, fmt.Errorf("kafka source %q: empty group", spec)
		}
	}
	return out, nil
}

// checkTopic refuses what Kafka does not take as a topic name.
func checkTopic(topic string) error {
	if topic == "" || topic == "." || topic == ".." || len(topic) > 249 {
		return fmt.Errorf("bad topic name %q", topic)
	}
	if strings.ContainsFunc(topic, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '.' && r != '_' && r != '-'
	}) {
		return fmt.Errorf("bad topic name %q (letters, digits, '.', '_' and '-' only)", topic)
	}
	return nil
}

// Config configures the adapter. Brokers and Topic are required.
type Config struct {
	Brokers []string
	Topic   string
	// Group is the consumer group (default DefaultGroup).
	Group string
	// SessionTimeout, RebalanceTimeout: see the defaults.
	SessionTimeout, RebalanceTimeout time.Duration
	// FetchWait is how long a fetch waits for a first record (default
	// DefaultFetchWait).
	FetchWait time.Duration
	// Name is the client id, shown by the brokers.
	Name string
	// Opts are more client options (tests: a dialer, a logger).
	Opts []kgo.Opt
}

func (c *Config) defaults() {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.FetchWait <= 0 {
		c.FetchWait = DefaultFetchWait
	}
	if c.Name == "" {
		c.Name = "settle"
	}
}

// Source is the Kafka adapter; it satisfies source.Source.
//
// How the contract maps onto Kafka:
//   - Fetch polls up to max records of the partitions this member holds;
//     from then until every one of them is acknowledged or given back, a
//     rebalance waits (up to RebalanceTimeout), so the partitions cannot
//     move while their records are in work.
//   - Ack commits, per partition, the offset after the last record such
//     that it and every record before it are acknowledged (and no record
//     before it is in work or given back): never past a record whose
//     outcome has not committed. It waits for the broker's answer.
//   - GiveBack commits nothing for those records and seeks the partition
//     back to the first of them, pausing it for the delay: they are
//     fetched again, with the records after them (replays if those
//     committed).
//   - Extend does nothing: the partitions are held by the member's
//     session, which the client keeps alive with heartbeats in the
//     background whatever the batch in work.
//   - Deliveries counts this process's own fetches of a record (Kafka
//     keeps no count); a record delivered again after a rebalance or a
//     restart counts 1.
type Source struct {
	cfg Config
	cl  *kgo.Client
	adm *kadm.Client

	mu      sync.Mutex
	parts   map[tp]*partition
	working map[tpo]struct{}
	closed  bool
	close   sync.Once
}

var _ source.Source = (*Source)(nil)

// tp names a partition; tpo a record.
type tp struct {
	topic string
	part  int32
}

type tpo struct {
	tp
	offset int64
}

// partition is what the member knows of one partition it holds.
type partition struct {
	// pending holds the offsets fetched and not yet acknowledged or
	// given back.
	pending map[int64]struct{}
	// hold is the first offset given back and not fetched again (-1:
	// none): nothing at or past it is committed until it comes back.
	hold int64
	// acked is the offset after the highest record acknowledged (-1:
	// none).
	acked int64
	// committed is the offset last committed by this member (-1: none).
	committed int64
	// deliveries counts this process's fetches of a record not yet
	// acknowledged.
	deliveries map[int64]int
}

// target is the offset the partition may be committed to: after the last
// acknowledged record, but never past a record in work or given back. -1
// when nothing may be committed.
func (p *partition) target() int64 {
	t := p.acked
	for off := range p.pending {
		t = min(t, off)
	}
	if p.hold >= 0 {
		t = min(t, p.hold)
	}
	return t
}

// Open connects to the brokers, checks that the topic exists (settle
// creates no topic) and joins the group. Consuming starts at the group's
// committed offsets, or at the start of a partition that has none.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	cfg.defaults()
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("error opening the kafka source: no brokers or no topic")
	}
	s := &Source{cfg: cfg, parts: map[tp]*partition{}, working: map[tpo]struct{}{}}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.Name),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(cfg.SessionTimeout / 3),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(cfg.FetchWait),
	}, cfg.Opts...)
	if err := topicExists(ctx, cfg.Brokers, cfg.Topic, cfg.Opts); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("error creating the kafka client: %w", err)
	}
	s.cl = cl
	s.adm = kadm.NewClient(cl)
	return s, nil
}

// topicExists asks the brokers whether topic exists, with a client of its
// own (one that consumes nothing).
func topicExists(ctx context.Context, brokers []string, topic string, extra []kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("settle-check")}, extra...)...)
	if err != nil {
		return fmt.Errorf("error creating the kafka client: %w", err)
	}
	defer cl.Close()
	return checkTopicExists(ctx, kadm.NewClient(cl), topic)
}

// ErrNoTopic is matched (errors.Is) when the topic does not exist: settle
// never creates one.
var ErrNoTopic = errors.New("the topic does not exist (settle creates no Kafka topic: create it with the partitions and retention you want)")

func checkTopicExists(ctx context.Context, adm *kadm.Client, topic string) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("error looking up Kafka topic %s: %w", topic, err)
	}
	d, ok := details[topic]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("kafka topic %s: %w", topic, ErrNoTopic)
	case d.Err != nil:
		return fmt.Errorf("error looking up Kafka topic %s: %w", topic, d.Err)
	}
	return nil
}

// Kind returns "kafka".
func (s *Source) Kind() string { return Kind }

// Client returns the adapter's client (tests read its group membership).
func (s *Source) Client() *kgo.Client { return s.cl }

// Group returns the consumer group.
func (s *Source) Group() string { return s.cfg.Group }

// TransportID is a record's transport id: topic/partition/offset.
func TransportID(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + strconv.FormatInt(offset, 10)
}

// ErrClosed is returned once the source is closed.
var ErrClosed = errors.New("the kafka source is closed")

// Fetch waits up to FetchWait for records and returns up to max of them.
// Between batches (nothing in work) it lets a waiting rebalance go first.
func (s *Source) Fetch(ctx context.Context, max int) ([]source.Message, error) {
	s.mu.Lock()
	idle, closed := len(s.working) == 0, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if idle {
		s.cl.AllowRebalance()
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.FetchWait)
	defer cancel()
	fs := s.cl.PollRecords(wctx, max)
	if fs.IsClientClosed() {
		return nil, ErrClosed
	}
	var errs []error
	fs.EachError(func(topic string, part int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("error fetching %s/%d: %w", topic, part, err))
		}
	})
	recs := fs.Records()
	if len(recs) == 0 {
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("error fetching from %s: %w", s.cfg.Topic, ctx.Err())
		}
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs := make([]source.Message, 0, len(recs))
	for _, r := range recs {
		p := s.part(tp{r.Topic, r.Partition})
		if p.hold >= 0 && r.Offset >= p.hold {
			p.hold = -1 // what was given back is fetched again: it is pending now
		}
		p.pending[r.Offset] = struct{}{}
		p.deliveries[r.Offset]++
		s.working[tpo{tp{r.Topic, r.Partition}, r.Offset}] = struct{}{}
		data := r.Value
		if data == nil {
			data = []byte{}
		}
		msgs = append(msgs, source.Message{
			TransportID: TransportID(r.Topic, r.Partition, r.Offset),
			Deliveries:  p.deliveries[r.Offset],
			Data:        data,
			Handle:      r,
		})
	}
	return msgs, nil
}

// part returns the state of partition k, made if absent; s.mu is held.
func (s *Source) part(k tp) *partition {
	p := s.parts[k]
	if p == nil {
		p = &partition{pending: map[int64]struct{}{}, hold: -1, acked: -1, committed: -1, deliveries: map[int64]int{}}
		s.parts[k] = p
	}
	return p
}

func record(m source.Message) (*kgo.Record, error) {
	r, ok := m.Handle.(*kgo.Record)
	if !ok {
		return nil, fmt.Errorf("message %s was not fetched by the kafka source", m.TransportID)
	}
	return r, nil
}

// Extend does nothing: see Source.
func (s *Source) Extend(context.Context, []source.Message) error { return nil }

// Ack marks msgs acknowledged and commits each partition they are in as
// far as its acknowledged records allow, waiting for the broker. Once
// nothing is in work, a waiting rebalance may go on.
func (s *Source) Ack(ctx context.Context, msgs []source.Message) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	touched := map[tp]bool{}
	var errs []error
	for _, m := range msgs {
		r, err := record(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k := tp{r.Topic, r.Partition}
		delete(s.working, tpo{k, r.Offset})
		p := s.parts[k]
		if p == nil {
			continue // the partition was lost meanwhile: its new holder delivers it again
		}
		delete(p.pending, r.Offset)
		delete(p.deliveries, r.Offset)
		p.acked = max(p.acked, r.Offset+1)
		touched[k] = true
	}
	offsets := s.toCommit(touched)
	s.mu.Unlock()
	if err := s.commit(ctx, offsets); err != nil {
		errs = append(errs, err)
	}
	s.allowIfIdle()
	return errors.Join(errs...)
}

// toCommit returns the offsets of the partitions in which may move
// forward; s.mu is held.
func (s *Source) toCommit(which map[tp]bool) map[string]map[int32]kgo.EpochOffset {
	out := map[string]map[int32]kgo.EpochOffset{}
	for k := range which {
		p := s.parts[k]
		if p == nil {
			continue
		}
		if t := p.target(); t >= 0 && t > p.committed {
			if out[k.topic] == nil {
				out[k.topic] = map[int32]kgo.EpochOffset{}
			}
			out[k.topic][k.part] = kgo.EpochOffset{Epoch: -1, Offset: t}
		}
	}
	return out
}

// commit commits offsets and waits for the broker's answer, recording
// what it accepted.
func (s *Source) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	if len(offsets) == 0 {
		return nil
	}
	var errs []error
	s.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("error committing offsets: %w", err))
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if err := kerr.ErrorForCode(pr.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("error committing %s/%d: %w", t.Topic, pr.Partition, err))
					continue
				}
				if p := s.parts[tp{t.Topic, pr.Partition}]; p != nil {
					p.committed = max(p.committed, offsets[t.Topic][pr.Partition].Offset)
				}
			}
		}
	})
	return errors.Join(errs...)
}

// allowIfIdle lets a waiting rebalance go on once nothing is in work.
func (s *Source) allowIfIdle() {
	s.mu.Lock()
	idle := len(s.working) == 0 && !s.closed
	s.mu.Unlock()
	if idle {
		s.cl.AllowRebalance()
	}
}

// GiveBack leaves msgs uncommitted and seeks each of their partitions back
// to the first of them, fetched again after delay.
func (s *Source) GiveBack(ctx context.Context, msgs []source.Message, delay time.Duration) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	var errs []error
	first := map[tp]int64{}
	for _, m := range msgs {
		r, err := record(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		k := tp{r.Topic, r.Partition}
		delete(s.working, tpo{k, r.Offset})
		p := s.parts[k]
		if p == nil {
			continue
		}
		delete(p.pending, r.Offset)
		if f, ok := first[k]; !ok || r.Offset < f {
			first[k] = r.Offset
		}
	}
	seek := map[string]map[int32]kgo.EpochOffset{}
	pause := map[string][]int32{}
	for k, off := range first {
		p := s.parts[k]
		if p.hold < 0 || off < p.hold {
			p.hold = off
		}
		if seek[k.topic] == nil {
			seek[k.topic] = map[int32]kgo.EpochOffset{}
		}
		seek[k.topic][k.part] = kgo.EpochOffset{Epoch: -1, Offset: p.hold}
		pause[k.topic] = append(pause[k.topic], k.part)
	}
	s.mu.Unlock()
	if len(seek) > 0 {
		// SetOffsets before AllowRebalance, so no revoke runs meanwhile.
		s.cl.PauseFetchPartitions(pause)
		s.cl.SetOffsets(seek)
		time.AfterFunc(delay, func() { s.cl.ResumeFetchPartitions(pause) })
	}
	s.allowIfIdle()
	return errors.Join(errs...)
}

// revoked runs when partitions leave this member in a rebalance (nothing
// is in work then): it commits them as far as their outcomes committed,
// then forgets them.
func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.mu.Lock()
	which := map[tp]bool{}
	for topic, parts := range revoked {
		for _, p := range parts {
			which[tp{topic, p}] = true
		}
	}
	offsets := s.toCommit(which)
	s.mu.Unlock()
	_ = s.commit(ctx, offsets) // a failure only makes the next holder record them again
	s.forget(revoked)
}

// lost runs when the member lost its partitions without a rebalance (its
// session expired, it was put out of the group): nothing can be committed
// for them any more.
func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.forget(lost)
}

func (s *Source) forget(parts map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			delete(s.parts, tp{topic, p})
		}
	}
}

// Lag is the number of records of the topic not yet committed by the
// group.
func (s *Source) Lag(ctx context.Context) (int64, error) {
	lags, err := s.adm.Lag(ctx, s.cfg.Group)
	if err != nil {
		return 0, fmt.Errorf("error reading the lag of group %s: %w", s.cfg.Group, err)
	}
	l, ok := lags[s.cfg.Group]
	if !ok {
		return 0, nil
	}
	if err := l.Error(); err != nil {
		return 0, fmt.Errorf("error reading the lag of group %s: %w", s.cfg.Group, err)
	}
	return l.Lag.TotalByTopic()[s.cfg.Topic].Lag, nil
}

// Retention returns the topic's retention.ms (0: -1, without limit).
func (s *Source) Retention(ctx context.Context) (time.Duration, error) {
	return Retention(ctx, s.adm, s.cfg.Topic)
}

// Retention reads topic's retention.ms: how long Kafka keeps a record,
// committed or not (0: without limit).
func Retention(ctx context.Context, adm *kadm.Client, topic string) (time.Duration, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("error reading the configuration of topic %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return 0, fmt.Errorf("error reading the configuration of topic %s: %w", topic, err)
	}
	if rc.Err != nil {
		return 0, fmt.Errorf("error reading the configuration of topic %s: %w", topic, rc.Err)
	}
	i := slices.IndexFunc(rc.Configs, func(c kadm.Config) bool { return c.Key == "retention.ms" })
	if i < 0 || rc.Configs[i].Value == nil {
		return 0, fmt.Errorf("topic %s: no retention.ms in its configuration", topic)
	}
	ms, err := strconv.ParseInt(*rc.Configs[i].Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("topic %s: retention.ms %q: %w", topic, *rc.Configs[i].Value, err)
	}
	if ms < 0 {
		return 0, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Close abandons the batch in work, if any (it is not committed: the
// partition's next holder delivers it again), and leaves the group, whose
// revoke commits what was acknowledged. It may be called more than once.
func (s *Source) Close() error {
	s.close.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.working = map[tpo]struct{}{}
		s.mu.Unlock()
		s.cl.CloseAllowingRebalance()
	})
	return nil
}
