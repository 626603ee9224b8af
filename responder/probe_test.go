package responder_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/natstest"
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
