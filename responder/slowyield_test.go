package responder_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/wire"
)

// fakePeers is SlowYieldConfig.Status: the live nodes' status it answers,
// and how often it was asked.
type fakePeers struct {
	mu    sync.Mutex
	live  []wire.NodeStatus
	err   error
	asked int
}

func (f *fakePeers) status(context.Context, time.Duration) ([]wire.NodeStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.live, f.err
}

func (f *fakePeers) set(live []wire.NodeStatus, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live, f.err = live, err
}

func (f *fakePeers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

// peer is a live node serving subject, ready, with round trip rtt.
func peer(instance, subject string, rtt time.Duration) wire.NodeStatus {
	return wire.NodeStatus{Node: instance, Instance: instance, NATSRTT: int64(rtt),
		Subjects: []wire.SubjectStatus{{Subject: subject, Serving: true, Ready: true}}}
}

const maxRTT = 100 * time.Millisecond

func newSlowYield(t *testing.T, rtt *atomic.Int64, peers *fakePeers, clk clock.Clock, ev *events.Publisher) *responder.SlowYield {
	t.Helper()
	y, err := responder.NewSlowYield(responder.SlowYieldConfig{
		RTT:      func() time.Duration { return time.Duration(rtt.Load()) },
		MaxRTT:   maxRTT,
		Instance: "self",
		Status:   peers.status,
		Clock:    clk,
		Logger:   slog.New(slog.DiscardHandler),
		Events:   ev,
	})
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// TestSlowYield: a node yields a subject only while its round trip is
// above MaxRTT and another live node, not starting, with a round trip
// within MaxRTT, serves the subject and is ready there; it asks the peers
// only while slow, at most once every 5 s a subject, and asks again at
// once after a fast spell.
func TestSlowYield(t *testing.T) {
	t.Parallel()
	seg := wire.SubjectSegment
	for _, tc := range []struct {
		name string
		live []wire.NodeStatus
		err  error
		want bool
	}{
		{"fast peer serves", []wire.NodeStatus{peer("other", seg, maxRTT)}, nil, true},
		{"no peer", nil, nil, false},
		{"question fails", []wire.NodeStatus{peer("other", seg, time.Millisecond)}, errors.New("no responders"), false},
		{"only itself", []wire.NodeStatus{peer("self", seg, time.Millisecond)}, nil, false},
		{"peer slow too", []wire.NodeStatus{peer("other", seg, maxRTT+1)}, nil, false},
		{"peer starting", []wire.NodeStatus{func() wire.NodeStatus {
			p := peer("other", seg, time.Millisecond)
			p.Starting = true
			return p
		}()}, nil, false},
		{"peer serves another subject", []wire.NodeStatus{peer("other", wire.SubjectSnowflake, time.Millisecond)}, nil, false},
		{"peer not ready", []wire.NodeStatus{func() wire.NodeStatus {
			p := peer("other", seg, time.Millisecond)
			p.Subjects[0].Ready = false
			return p
		}()}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rtt atomic.Int64
			rtt.Store(int64(2 * maxRTT))
			peers := &fakePeers{live: tc.live, err: tc.err}
			y := newSlowYield(t, &rtt, peers, clock.NewFake(time.Unix(0, 0)), nil)
			if got := y.Yield(t.Context(), seg); got != tc.want {
				t.Fatalf("Yield %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("asks only while slow, at most every 5s", func(t *testing.T) {
		t.Parallel()
		var rtt atomic.Int64
		rtt.Store(int64(maxRTT)) // at the limit: not slow
		peers := &fakePeers{live: []wire.NodeStatus{peer("other", seg, time.Millisecond)}}
		clk := clock.NewFake(time.Unix(0, 0))
		y := newSlowYield(t, &rtt, peers, clk, nil)
		if y.Yield(t.Context(), seg) || peers.count() != 0 {
			t.Fatalf("a node within MaxRTT yields or asks (%d questions)", peers.count())
		}
		rtt.Store(int64(maxRTT + 1))
		if !y.Yield(t.Context(), seg) || peers.count() != 1 {
			t.Fatalf("slow beside a fast peer: no yield after %d questions", peers.count())
		}
		peers.set(nil, nil) // the fast peer went away: heard of at the next question
		clk.Advance(4 * time.Second)
		if !y.Yield(t.Context(), seg) || peers.count() != 1 {
			t.Fatalf("within 5s: asked again (%d questions) or forgot the answer", peers.count())
		}
		if y.Yield(t.Context(), wire.SubjectSnowflake) || peers.count() != 2 {
			t.Fatalf("another subject: %d questions, want its own", peers.count())
		}
		clk.Advance(time.Second)
		if y.Yield(t.Context(), seg) || peers.count() != 3 {
			t.Fatalf("after 5s: yields, or %d questions, want 3", peers.count())
		}
		peers.set([]wire.NodeStatus{peer("other", seg, time.Millisecond)}, nil)
		rtt.Store(int64(time.Millisecond))
		if y.Yield(t.Context(), seg) || peers.count() != 3 {
			t.Fatalf("fast again: yields or asks (%d questions)", peers.count())
		}
		rtt.Store(int64(maxRTT + 1)) // slow again within 5s: the old answer is gone
		if !y.Yield(t.Context(), seg) || peers.count() != 4 {
			t.Fatalf("slow again: no yield after %d questions, want 4", peers.count())
		}
	})
}

// TestNewSlowYieldRefuses: RTT and a way to ask the peers are required.
func TestNewSlowYieldRefuses(t *testing.T) {
	rtt := func() time.Duration { return 0 }
	status := (&fakePeers{}).status
	for _, tc := range []struct {
		name string
		cfg  responder.SlowYieldConfig
	}{
		{"no RTT", responder.SlowYieldConfig{MaxRTT: maxRTT, Status: status}},
		{"no Conn or Status", responder.SlowYieldConfig{RTT: rtt, MaxRTT: maxRTT}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := responder.NewSlowYield(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// TestSegmentKeeper: once a second the keeper takes a slow node's segment
// endpoint out of its queue group while a fast peer serves segment, and
// back once the node is fast again, with a queue.left and a queue.joined
// event; Close leaves the endpoint where it is.
func TestSegmentKeeper(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	r, err := responder.Start(responder.Config{
		Conn:   nc,
		IDs:    &counter{tags: map[string]bool{"demo": true}},
		Node:   "slow",
		Status: func() wire.NodeStatus { return wire.NodeStatus{Node: "slow"} },
		SegmentConn: func() (*nats.Conn, error) {
			return nats.Connect(s.ClientURL(), nats.RetryOnFailedConnect(true))
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })

	var mu sync.Mutex
	var kinds []string
	ev := events.New(events.Config{Node: "slow", Publish: func(subject string, _ []byte) error {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, subject)
		return nil
	}})
	emitted := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), kinds...)
	}

	var rtt atomic.Int64
	rtt.Store(int64(2 * maxRTT))
	peers := &fakePeers{live: []wire.NodeStatus{peer("other", wire.SubjectSegment, time.Millisecond)}}
	clk := clock.NewFake(time.Unix(0, 0))
	k := newSlowYield(t, &rtt, peers, clk, ev).KeepSegment(r)
	closed := false
	t.Cleanup(func() {
		if !closed {
			k.Close()
		}
	})
	tick := func() {
		t.Helper()
		if err := clk.BlockUntil(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}

	tick()
	testenv.Eventually(t, "the segment endpoint out of its queue group", 10*time.Second, func() bool { return r.SegmentService() == nil })
	testenv.Eventually(t, "queue.left", 10*time.Second, func() bool { return len(emitted()) == 1 })
	if got := emitted()[0]; got != events.Subject(events.QueueLeft) {
		t.Fatalf("event %s, want %s", got, events.Subject(events.QueueLeft))
	}

	rtt.Store(int64(time.Millisecond))
	tick()
	testenv.Eventually(t, "the segment endpoint back in its queue group", 10*time.Second, func() bool { return r.SegmentService() != nil })
	testenv.Eventually(t, "queue.joined", 10*time.Second, func() bool { return len(emitted()) == 2 })
	if got := emitted()[1]; got != events.Subject(events.QueueJoined) {
		t.Fatalf("event %s, want %s", got, events.Subject(events.QueueJoined))
	}

	k.Close()
	closed = true
	if r.SegmentService() == nil {
		t.Fatal("Close took the segment endpoint out of its queue group")
	}
}

// TestSlowYieldWithoutMaxRTT: without a limit (or a SlowYield) the node
// is never slow: no Yield func for snownode, no keeper, no questions.
func TestSlowYieldWithoutMaxRTT(t *testing.T) {
	peers := &fakePeers{live: []wire.NodeStatus{peer("other", wire.SubjectSegment, 0)}}
	y, err := responder.NewSlowYield(responder.SlowYieldConfig{RTT: func() time.Duration { return time.Hour }, Status: peers.status})
	if err != nil {
		t.Fatal(err)
	}
	if y.Yield(t.Context(), wire.SubjectSegment) || peers.count() != 0 {
		t.Fatalf("yields or asks (%d questions) without MaxRTT", peers.count())
	}
	var none *responder.SlowYield
	for _, y := range []*responder.SlowYield{y, none} {
		if y.YieldFunc(wire.SubjectSnowflake) != nil {
			t.Fatal("a Yield func without MaxRTT")
		}
		if k := y.KeepSegment(&responder.Responder{}); k != nil {
			t.Fatal("a SegmentKeeper without MaxRTT")
		}
	}
	none.KeepSegment(nil).Close() // a nil keeper closes
}
