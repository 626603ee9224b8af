package responder_test

import (
	"encoding/json"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/wire"
)

// A probe (wire.ProbeToken as the tag) is answered by the node whose
// subscription got it, with its name, and counted; it takes no id and is
// no id request (Observe does not see it).
func TestProbeAnsweredAndCounted(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	c := &counter{tags: map[string]bool{"demo": true}}
	observed := make(chan responder.Observation, 10)
	r, err := responder.Start(responder.Config{Conn: nc, IDs: c, Node: "probed", Instance: "i1",
		Logger: slog.New(slog.DiscardHandler), Observe: func(o responder.Observation) { observed <- o }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	for i := 1; i <= 3; i++ {
		reply, err := nc.Request(wire.SegmentPrefix+wire.ProbeToken, nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if werr := wire.ReplyError(reply); werr != nil {
			t.Fatalf("probe answered %v", werr)
		}
		var pr wire.ProbeReply
		if err := json.Unmarshal(reply.Data, &pr); err != nil || pr != (wire.ProbeReply{Node: "probed", Instance: "i1", Subject: wire.SubjectSegment}) {
			t.Fatalf("probe reply %q: %+v, %v", reply.Data, pr, err)
		}
		if got := r.Probed(wire.SubjectSegment); got != uint64(i) {
			t.Fatalf("Probed(segment) = %d after %d probes", got, i)
		}
	}
	if c.next.Load() != 0 || len(observed) != 0 {
		t.Fatalf("a probe took %d ids, observed %d requests", c.next.Load(), len(observed))
	}
	// A tag that merely looks alike is a tag.
	if _, err := request(t, nc, "leaf.segment.probe", "", false); err == nil {
		t.Fatal("leaf.segment.probe (an unknown tag) answered")
	}
	if r.Probed(wire.SubjectSegment) != 3 {
		t.Fatal("an id request counted as a probe")
	}
}

// A Prober sends one probe a round on each subject it is told the node
// serves, the monotonic tags in turn, and counts what came of each: here
// the segment probes reach this node's responder, while no one answers
// snowflake or the monotonic tags.
func TestProberCountsAnsweredAndFailed(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{}, Node: "probed", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	targets := responder.ProbeTargets{Segment: true, Snowflake: true, Mono: []string{"a", "b"}}
	p, err := responder.StartProber(responder.ProberConfig{Conn: nc, Targets: func() responder.ProbeTargets { return targets },
		Node: "probed", Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	const rounds = 3
	for i := 1; i <= rounds; i++ {
		if err := clk.BlockUntil(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(responder.DefaultProbeEvery)
		testenv.Eventually(t, "a round of probes", 10*time.Second, func() bool {
			sent := p.Sent()
			return sent[responder.ProbeKey{Subject: wire.SubjectMono, Result: responder.ProbeFailed}] == uint64(i)
		})
	}
	want := map[responder.ProbeKey]uint64{
		{Subject: wire.SubjectSegment, Result: responder.ProbeAnswered}: rounds,
		{Subject: wire.SubjectSnowflake, Result: responder.ProbeFailed}: rounds,
		{Subject: wire.SubjectMono, Result: responder.ProbeFailed}:      rounds,
	}
	if got := p.Sent(); !maps.Equal(got, want) {
		t.Fatalf("Sent() = %v, want %v", got, want)
	}
	if got := r.Probed(wire.SubjectSegment); got != rounds {
		t.Fatalf("the responder answered %d segment probes, want %d", got, rounds)
	}
	var nilProber *responder.Prober
	if len(nilProber.Sent()) != 0 {
		t.Fatal("a nil Prober sent probes")
	}
	nilProber.Close()
}

// StartProber refuses a config without a connection or targets.
func TestStartProberNeedsConnAndTargets(t *testing.T) {
	if _, err := responder.StartProber(responder.ProberConfig{}); err == nil {
		t.Fatal("StartProber without Conn and Targets started")
	}
}
