package responder_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// TestScope: responders of two regions on one NATS server answer the
// floors, the time and the tag announcements of their own region only,
// and the status on their region's subject and on leaf.admin.status. A
// tag created through west is checked against west's floors alone (east's
// count another store's local numbers) and announced to west alone.
func TestScope(t *testing.T) {
	s := natstest.RunServer(t)
	var mu sync.Mutex
	changed := map[string][]string{} // region → tags announced to it
	start := func(region string, floor int64, admin bool) {
		cfg := responder.Config{
			Conn:   natstest.Connect(t, s.ClientURL()),
			IDs:    &counter{tags: map[string]bool{}, release: make(chan struct{})},
			Node:   region + "-1",
			Scope:  wire.Scope(region),
			Status: func() wire.NodeStatus { return wire.NodeStatus{Node: region + "-1"} },
			Floor:  func(string) int64 { return floor },
			TagChanged: func(tag string) {
				mu.Lock()
				defer mu.Unlock()
				changed[region] = append(changed[region], tag)
			},
		}
		if admin {
			cfg.Store = memstore.New()
		}
		r, err := responder.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop() })
	}
	start("east", 100, false)
	start("west", 5, true)
	nc := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const window = 300 * time.Millisecond

	for region, want := range map[wire.Scope]int64{"east": 100, "west": 5} {
		high, who, err := ask.Floors(ctx, nc, region, wire.MustTag("t"), window)
		if err != nil || high != want || who != string(region)+"-1" {
			t.Errorf("floors of %s: %d (%s), %v; want %d (%s-1)", region, high, who, err, want, region)
		}
		sts, err := ask.Status(ctx, nc, region, window)
		if err != nil || len(sts) != 1 || sts[0].Node != string(region)+"-1" {
			t.Errorf("status of %s: %v, %v; want %s-1 alone", region, sts, err, region)
		}
		pc, err := ask.PeerClocks(ctx, nc, region, window, time.Now)
		if err != nil || len(pc.Peers) != 1 || pc.Peers[0] != string(region)+"-1" {
			t.Errorf("clocks of %s: %v, %v; want %s-1 alone", region, pc.Peers, err, region)
		}
	}
	if sts, err := ask.Status(ctx, nc, "", window); err != nil || len(sts) != 2 {
		t.Errorf("leaf.admin.status: %v, %v; want both regions' nodes", sts, err)
	}
	if high, _, err := ask.Floors(ctx, nc, "", wire.MustTag("t"), window); err != nil || high != 0 {
		t.Errorf("leaf.admin.floor.t: %d, %v; want no answer from a node of a region", high, err)
	}

	body, _ := json.Marshal(wire.AdminRequest{Tag: "t", MaxID: 50})
	reply, err := nc.Request(wire.TagCreateSubject, body, 5*time.Second)
	if err == nil {
		err = wire.ReplyError(reply)
	}
	if err != nil {
		t.Fatalf("create t at 50 in west (west's floor 5, east's 100): %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the announcement's delivery
	mu.Lock()
	defer mu.Unlock()
	// West's creating node takes the tag in itself, then hears its own
	// announcement too: t, once or twice, to west alone.
	if w := changed["west"]; len(w) == 0 || slices.ContainsFunc(w, func(tag string) bool { return tag != "t" }) || len(changed["east"]) != 0 {
		t.Errorf("tags announced: %v, want t to west alone", changed)
	}
}
