package kafkasink_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/settle/settle/events"
	"github.com/settle/settle/events/kafkasink"
	"github.com/settle/settle/internal/testsupport/kafkatest"
)

// answerCutter is a TCP proxy in front of a broker that, once armed, lets
// the next Produce request through and cuts the connection before its
// answer comes back: the broker stored the records, the client never
// heard so.
type answerCutter struct {
	ln     net.Listener
	target string
	// stored reports whether the broker has stored the cut request.
	stored func() bool
	armed  atomic.Bool
	cut    atomic.Int64
	wg     sync.WaitGroup
}

func newAnswerCutter(t *testing.T, target string, stored func() bool) *answerCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &answerCutter{ln: ln, target: target, stored: stored}
	p.wg.Go(p.serve)
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *answerCutter) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

// pipe forwards one connection, request frame by request frame (a 4-byte
// length, then the request: api key first; 0 is Produce).
func (p *answerCutter) pipe(client net.Conn) {
	defer client.Close()
	broker, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer broker.Close()
	var answers sync.WaitGroup
	silenced := make(chan struct{})
	answers.Go(func() {
		// Broker to client, until the connection is cut.
		buf := make([]byte, 32<<10)
		for {
			n, err := broker.Read(buf)
			select {
			case <-silenced:
				return
			default:
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	defer func() {
		broker.Close() // ends the answers' side
		answers.Wait()
	}()
	for {
		var size [4]byte
		if _, err := io.ReadFull(client, size[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(client, frame); err != nil {
			return
		}
		produce := len(frame) >= 2 && binary.BigEndian.Uint16(frame[:2]) == 0
		cutting := produce && p.armed.CompareAndSwap(true, false)
		if cutting {
			close(silenced)
		}
		if _, err := broker.Write(append(size[:], frame...)); err != nil {
			return
		}
		if cutting {
			// Once the broker has stored it, cut both sides: its answer
			// never reaches the client.
			for deadline := time.Now().Add(30 * time.Second); !p.stored() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond) // the broker's log gives no signal
			}
			p.cut.Add(1)
			client.Close()
			broker.Close()
			return
		}
	}
}

// TestIdempotentProducer: the broker stores an event but its answer is
// lost with the connection; the producer sends it again on a new
// connection under the same producer id and sequence, the broker knows it
// already, and the delivery counts with the event stored once.
func TestIdempotentProducer(t *testing.T) {
	t.Parallel()
	kc := kafkatest.Start(t, 1, topic)
	ctx := context.Background()
	_, adm := kc.Client(t)
	proxy := newAnswerCutter(t, kc.Addr(), func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		end, ok := ends.Lookup(topic, 0)
		return ok && end.Offset > 0
	})
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, proxy.ln.Addr().String())
	}
	s, err := kafkasink.Open(ctx, kafkasink.Config{Brokers: []string{kc.Addr()}, Topic: topic, Timeout: 30 * time.Second,
		Opts: []kgo.Opt{kgo.Dialer(dial)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	e := events.Event{ID: "i1:1", SettlementID: "i1", Type: "settlement.pending", Payload: json.RawMessage(`{"event_id":"i1:1"}`), CreatedAt: time.Now()}
	proxy.armed.Store(true)
	if res := s.Deliver(ctx, e); res.Err != nil {
		t.Fatalf("Deliver = %+v", res)
	}
	if proxy.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d answers, want 1", proxy.cut.Load())
	}
	if recs := kafkatest.Records(t, kc, topic); len(recs) != 1 {
		t.Errorf("%d records in the topic after a lost answer, want 1 (the producer is idempotent)", len(recs))
	}
}
