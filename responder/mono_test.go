package responder_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/memlease"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// TestServeMono: leaf.mono.<tag> is answered from the tag's leader while
// ServeMono runs: ids strictly increasing across requests, a probe counted
// and answered with no id taken, 503 once the leader no longer leads, no
// responder once stopped, and no ServeMono after the Responder stopped.
func TestServeMono(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	store := memstore.New()
	tag := wire.MustTag("ticks")
	if err := store.Create(context.Background(), segment.Tag{Name: tag, Step: 10, Mode: segment.Mode{Kind: segment.KindMono}}); err != nil {
		t.Fatal(err)
	}
	l, err := mono.NewLeader(mono.Config{Tag: tag, Node: "a", Ranges: &segment.Reserver{Store: store, Logger: quiet},
		Lease: memlease.New(time.Second, nil), Step: 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go l.Run(context.Background())
	t.Cleanup(l.Close)
	testenv.Eventually(t, "leading", 10*time.Second, l.Leading)

	observed := make(chan responder.Observation, 10)
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{}, Node: "n", Instance: "i1", Logger: quiet,
		Observe: func(o responder.Observation) { observed <- o }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	stop, err := r.ServeMono(tag, l)
	if err != nil {
		t.Fatal(err)
	}
	subject := wire.MonoPrefix + tag.String()
	var last int64
	for _, n := range []int{25, 1, 7} {
		msg, err := nc.RequestMsg(wire.NewRequest(subject, n, true), 5*time.Second)
		if err == nil {
			err = wire.ReplyError(msg)
		}
		if err != nil {
			t.Fatalf("leaf.mono.ticks (%d ids): %v", n, err)
		}
		ids, err := wire.DecodeIDs(nil, msg.Data, true)
		if err != nil || len(ids) != n {
			t.Fatalf("decoded %v, %v; want %d ids", ids, err, n)
		}
		for _, id := range ids {
			if id <= last {
				t.Fatalf("id %d after %d: not strictly increasing", id, last)
			}
			last = id
		}
		if o := <-observed; o.Engine != "mono" || o.Tag != "ticks" || o.Code != "200" || o.IDs != n {
			t.Fatalf("observed %+v, want mono ticks 200 with %d ids", o, n)
		}
	}

	probe := &nats.Msg{Subject: subject, Header: nats.Header{wire.ProbeHeader: []string{"n"}}}
	reply, err := nc.RequestMsg(probe, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var pr wire.ProbeReply
	if err := json.Unmarshal(reply.Data, &pr); err != nil || pr != (wire.ProbeReply{Node: "n", Instance: "i1", Subject: wire.SubjectMono}) {
		t.Fatalf("probe reply %q: %+v, %v", reply.Data, pr, err)
	}
	if got := r.Probed(wire.SubjectMono); got != 1 {
		t.Fatalf("Probed(mono) = %d, want 1", got)
	}

	l.Close() // no longer leads: a switch-over, 503
	msg, err := nc.RequestMsg(wire.NewRequest(subject, 1, true), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ReplyError(msg); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("leaf.mono.ticks from a node that no longer leads = %v, want a 503", err)
	}

	stop()
	if _, err := nc.RequestMsg(wire.NewRequest(subject, 1, true), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("leaf.mono.ticks after stop = %v, want no responders", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ServeMono(tag, l); err == nil {
		t.Fatal("ServeMono after Stop succeeded")
	}
}
