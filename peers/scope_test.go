package peers_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/wire"
)

// TestScopes: Sets of two regions on one NATS server are members of
// their own region's bucket, and see only their region's nodes: status,
// worker claims, floors asked and floors announced. Every node still
// answers leaf.admin.status, which leafctl status asks.
func TestScopes(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claim := int64(5)
	east := memberIn(t, url, "east", "e1", wire.NodeStatus{Snow: &wire.SnowflakeStatus{Worker: -1, Claim: &claim}}, 900)
	west := memberIn(t, url, "west", "w1", wire.NodeStatus{}, 0)
	west2 := memberIn(t, url, "west", "w2", wire.NodeStatus{}, 0)

	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	for bucket, want := range map[string]int{"leaf_nodes_east": 1, "leaf_nodes_west": 2} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("%s: %v", bucket, err)
		}
		keys, err := kv.Keys(ctx)
		if err != nil || len(keys) != want {
			t.Errorf("%s: keys %v, %v; want %d", bucket, keys, err, want)
		}
	}
	if _, err := js.KeyValue(ctx, wire.MembersBucket); err == nil {
		t.Errorf("a bucket %s of no region", wire.MembersBucket)
	}

	sts, err := west.Statuses(ctx)
	if err != nil || len(sts) != 1 || sts[0].Node != "w2" {
		t.Fatalf("w1's Statuses = %v, %v; want w2 alone", sts, err)
	}
	if _, ok, err := west.Holder(ctx, 5); err != nil || ok {
		t.Fatalf("w1's Holder(5) = %v, %v; want none: e1's claim is of another region's worker ids", ok, err)
	}
	tag := wire.MustTag("t")
	if high, who, err := west.HighestFloor(ctx, tag, 200*time.Millisecond); err != nil || high != 0 {
		t.Fatalf("w1's HighestFloor = %d (%s), %v; want 0: e1's floor counts east's local numbers", high, who, err)
	}
	if high, who, err := east.HighestFloor(ctx, tag, 200*time.Millisecond); err != nil || high != 900 || who != "e1" {
		t.Fatalf("e1's HighestFloor = %d (%s), %v; want its own 900", high, who, err)
	}

	for _, s := range []*peers.Set{east, west, west2} {
		if err := s.HearFloors(ctx, peers.Floors{Store: "inc"}); err != nil {
			t.Fatal(err)
		}
	}
	east.Announce("t", 5000, "segment")
	west2.Announce("u", 70, "segment")
	deadline := time.Now().Add(5 * time.Second)
	for f, _ := west.Floor("u"); f != 70; f, _ = west.Floor("u") {
		if time.Now().After(deadline) {
			t.Fatalf("w1 did not hear w2's floor of u")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // e1's announcement, sent first, had every chance to arrive
	if f, _ := west.Floor("t"); f != 0 {
		t.Fatalf("w1 heard e1's floor of t: %d", f)
	}

	all, err := ask.Status(ctx, natstest.Connect(t, url), "", 300*time.Millisecond)
	if err != nil || len(all) != 3 {
		t.Fatalf("leaf.admin.status: %d answers, %v; want every region's 3", len(all), err)
	}
}
