package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestSlowPeerIsWaitedFor: a live node whose answers take
// longer than the checks' window — far from NATS, behind cluster routes
// with latency, on a loaded host — was taken for no node at all: a second
// --name, a worker id a live node served (with 200 ms routes), a tag's
// floors (a newcomer would create the tag again from 1). Every node keeps a key in wire.MembersBucket, and the checks
// wait for every member: here a member under the name "twin" answers its
// status only after 1.2 s, four times the window, and a node named "twin"
// refuses to start, naming it. A member that never answers holds the
// start back (peers.ErrSilent, tried again) until its key is gone.
func TestSlowPeerIsWaitedFor(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.MembersBucket, History: 1, TTL: time.Minute, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(wire.Member{Node: "twin", Instance: "far-away"})
	if _, err := kv.Put(ctx, "far-away", rec); err != nil {
		t.Fatal(err)
	}
	slow := make(chan struct{})
	sub, err := nc.Subscribe(wire.StatusSubject, func(m *nats.Msg) {
		go func() {
			select {
			case <-slow:
				return // silent from now on
			case <-time.After(1200 * time.Millisecond):
			}
			b, _ := json.Marshal(wire.NodeStatus{Node: "twin", Instance: "far-away", PID: 4242, Host: "far"})
			_ = m.Respond(b)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cfg := config.Config{Name: "twin", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}}
	err = startErr(t, cfg)
	if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "node twin (pid 4242 on host far") {
		t.Fatalf("a node named twin beside a live twin that answers in 1.2 s: %v, want ErrConfig naming it", err)
	}

	// Silent: the start waits, and says why.
	close(slow)
	_, err = tryStart(t, cfg, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not answer") || !strings.Contains(err.Error(), "twin (instance far-away)") {
		t.Fatalf("a start beside a silent member: %v, want it held back naming the member", err)
	}
	// Gone (its key deleted, as its TTL would): the node starts.
	if err := kv.Delete(ctx, "far-away"); err != nil {
		t.Fatal(err)
	}
	n, err := tryStart(t, cfg, 30*time.Second)
	if err != nil {
		t.Fatalf("start once the silent member is gone: %v", err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSlowPeerFloorRefusesRestart: a tag restart (and create) asks the
// live nodes for their floors of the tag; a member that answers only
// after 1 s, with a floor above the one asked for, refuses it. The
// responder gathered for 250 ms alone and restarted the tag below ids that
// node had served.
func TestSlowPeerFloorRefusesRestart(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	startNode(t, config.Config{Name: "near", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}})
	nc := natstest.Connect(t, s.ClientURL())
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, wire.MembersBucket)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(wire.Member{Node: "far", Instance: "far-1", Serving: true})
	if _, err := kv.Put(ctx, "far-1", rec); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(wire.FloorPrefix+"orders", func(m *nats.Msg) {
		go func() {
			time.Sleep(time.Second)
			b, _ := json.Marshal(wire.NodeFloor{Node: "far", Instance: "far-1", Tag: "orders", Floor: 50_000})
			_ = m.Respond(b)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	err = adminErr(t, nc, "leaf.admin.tag.restart", wire.AdminRequest{Tag: "orders", Floor: 1000})
	if err == nil || !strings.Contains(err.Error(), "node far") {
		t.Fatalf("restart at 1000 below a slow member's floor 50000: %v, want refused naming node far", err)
	}
}
