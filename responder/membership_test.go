package responder_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/wire"
)

// segmentCount is the segment endpoint's requests in r.Endpoints.
func segmentCount(r *responder.Responder) int {
	n := 0
	for _, e := range r.Endpoints() {
		if e.Name == "segment" {
			n += e.NumRequests
		}
	}
	return n
}

// TestSetSegment: with Config.SegmentConn the segment endpoint leaves its
// queue group (requests get no responders, the admin endpoints and the
// worker errors stay on the main service) and joins it again, on a
// connection of its own each time; its request count goes on across the
// leave (leafmq_requests_total{endpoint="segment"}).
func TestSetSegment(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	dials := 0
	r, err := responder.Start(responder.Config{
		Conn:   nc,
		IDs:    &counter{tags: map[string]bool{"demo": true}},
		Node:   "seg",
		Status: func() wire.NodeStatus { return wire.NodeStatus{Node: "seg"} },
		SegmentConn: func() (*nats.Conn, error) {
			dials++
			return nats.Connect(s.ClientURL(), nats.RetryOnFailedConnect(true))
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	answers := func() {
		t.Helper()
		if ids, err := request(t, nc, wire.SegmentPrefix+"demo", "2", false); err != nil || len(ids) != 2 {
			t.Fatalf("request: %v %v, want 2 ids", ids, err)
		}
	}
	if r.SegmentService() == nil || r.SegmentService() == r.Service() || dials != 1 {
		t.Fatalf("segment service %v (main %v) after %d dials: want one of its own", r.SegmentService(), r.Service(), dials)
	}
	answers()
	answers()
	if got := segmentCount(r); got != 2 {
		t.Fatalf("segment requests %d, want 2", got)
	}

	if err := r.SetSegment(false); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSegment(false); err != nil {
		t.Fatalf("leaving twice: %v", err)
	}
	if r.SegmentService() != nil {
		t.Fatal("SegmentService after leaving")
	}
	if _, err := nc.Request(wire.SegmentPrefix+"demo", []byte("1"), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request out of the group: %v, want no responders", err)
	}
	if _, err := nc.Request(wire.StatusSubject, nil, 5*time.Second); err != nil {
		t.Fatalf("leaf.admin.status out of the segment group: %v", err)
	}
	if got := segmentCount(r); got != 2 {
		t.Fatalf("segment requests %d out of the group, want the 2 before", got)
	}

	if err := r.SetSegment(true); err != nil {
		t.Fatal(err)
	}
	if dials != 2 {
		t.Fatalf("%d dials after a rejoin, want 2", dials)
	}
	answers()
	if got := segmentCount(r); got != 3 {
		t.Fatalf("segment requests %d after the rejoin, want 3", got)
	}
	// A worker's error still reaches the client, through the main service.
	if _, err := request(t, nc, wire.SegmentPrefix+"nope", "1", false); !errors.Is(err, wire.ErrUnknownTag) {
		t.Fatalf("unknown tag: %v", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSegment(true); err == nil {
		t.Fatal("joined after Stop")
	}
}

// TestSetSegmentWithoutConn: without Config.SegmentConn the segment
// endpoint is part of the main service and cannot leave.
func TestSetSegmentWithoutConn(t *testing.T) {
	t.Parallel()
	nc, _ := setup(t)
	if _, err := request(t, nc, wire.SegmentPrefix+"demo", "1", false); err != nil {
		t.Fatal(err)
	}
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.SegmentService() != r.Service() {
		t.Fatal("SegmentService is not the main service")
	}
	if err := r.SetSegment(false); err == nil {
		t.Fatal("left without a SegmentConn")
	}
}
