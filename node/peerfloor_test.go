package node_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// adminErr sends an admin request and returns the reply's error.
func adminErr(t *testing.T, nc *nats.Conn, subject string, req wire.AdminRequest) error {
	t.Helper()
	body, _ := json.Marshal(req)
	reply, err := nc.Request(subject, body, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	return wire.ReplyError(reply)
}

// settleFloors waits until every node has a floor of tag and the loads made
// ahead of need have landed (the floors stay put for a moment).
func settleFloors(t *testing.T, tag string, nodes ...*node.Node) {
	t.Helper()
	testenv.Eventually(t, "settled floors of "+tag, 10*time.Second, func() bool {
		before := make([]int64, len(nodes))
		for i, n := range nodes {
			if before[i] = n.SegmentFloor(tag); before[i] == 0 {
				return false
			}
		}
		time.Sleep(300 * time.Millisecond)
		for i, n := range nodes {
			if n.SegmentFloor(tag) != before[i] {
				return false
			}
		}
		return true
	})
}

// allocBucket is the alloc KV bucket, for acting as an operator with the
// nats CLI would.
func allocBucket(t *testing.T, nc *nats.Conn) (jetstream.KeyValue, context.Context) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv, ctx
}

// The store can forget a tag entirely — its key deleted twice, so only
// markers are left in the bucket's history (an operator's script
// retried) — but the live nodes have not: a restart (or
// a create) below the highest floor any live node reports is refused,
// naming that node; at it, it works.
func TestRestartRefusedBelowLiveNodesFloor(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	a := startNode(t, config.Config{Name: "fa", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	b := startNode(t, config.Config{Name: "fb", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	nc := natstest.Connect(t, s.ClientURL())
	for i, fails := 0, 0; i < 40 || a.SegmentFloor("forgot") == 0 || b.SegmentFloor("forgot") == 0; i++ {
		if _, err := take(nc, "forgot", 100, true); err != nil { // a 503 while a busy machine loads
			if fails++; fails > 50 || i > 400 {
				t.Fatalf("take %d: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Let the loads made ahead of need land: the floors then stay put.
	settleFloors(t, "forgot", a, b)
	lowFloor, highFloor, highNode := int64(-1), int64(0), ""
	for _, n := range []*node.Node{a, b} {
		f := n.SegmentFloor("forgot")
		if lowFloor < 0 || f < lowFloor {
			lowFloor = f
		}
		if f > highFloor {
			highFloor, highNode = f, n.Name()
		}
	}
	kv, ctx := allocBucket(t, nc)
	for range 2 {
		if err := kv.Delete(ctx, "forgot"); err != nil {
			t.Fatal(err)
		}
	}
	err := adminErr(t, nc, "leaf.admin.tag.restart", wire.AdminRequest{Tag: "forgot", Floor: lowFloor})
	if err == nil || !strings.Contains(err.Error(), highNode) {
		t.Fatalf("restart at %d below node %s's floor %d: %v; want refused naming it", lowFloor, highNode, highFloor, err)
	}
	if err := adminErr(t, nc, "leaf.admin.tag.restart", wire.AdminRequest{Tag: "forgot", Floor: highFloor}); err != nil {
		t.Fatalf("restart at the highest floor %d: %v", highFloor, err)
	}
	// create of a tag the store forgot, below a live node's floor.
	for range 2 {
		if err := kv.Purge(ctx, "forgot"); err != nil {
			t.Fatal(err)
		}
	}
	err = adminErr(t, nc, "leaf.admin.tag.create", wire.AdminRequest{Tag: "forgot", MaxID: lowFloor})
	if err == nil || !strings.Contains(err.Error(), segment.ErrBelowFloor.Error()) {
		t.Fatalf("create at %d below live floors (up to %d): %v; want refused", lowFloor, highFloor, err)
	}
}

// An operator writes a lowered max_id twice with
// `nats kv put` (the bucket's history then holds no higher revision), at
// the lower of two nodes' floors. The node with the lower floor must not
// serve the ids the other served: it heard the other's floor
// (leaf.floor.<tag>) and takes no range below it.
func TestLoweredTwiceRefusedByPeerFloor(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	a := startNode(t, config.Config{Name: "pa", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	b := startNode(t, config.Config{Name: "pb", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	nc := natstest.Connect(t, s.ClientURL())
	seen := map[int64]bool{}
	takeAll := func(what string, n int, mayFail bool) {
		t.Helper()
		for i, fails := 0, 0; i < n; i++ {
			ids, err := take(nc, "twice", 100, true)
			if err != nil {
				if mayFail || strings.Contains(err.Error(), "503") && fails < 50 {
					fails++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				t.Fatalf("%s: take %d: %v", what, i, err)
			}
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("%s: id %d handed out twice", what, id)
				}
				seen[id] = true
			}
		}
	}
	takeAll("before", 60, false)
	settleFloors(t, "twice", a, b)
	low := min(a.SegmentFloor("twice"), b.SegmentFloor("twice"))
	kv, ctx := allocBucket(t, nc)
	row := []byte(`{"max_id":` + strconv.FormatInt(low, 10) + `,"step":1000}`)
	for range 2 {
		if _, err := kv.Put(ctx, "twice", row); err != nil {
			t.Fatal(err)
		}
	}
	takeAll("after the row was lowered twice", 100, true)
}

// TestLoweredTwiceAfterLostAnnouncement (I1, docs/protocol.md): node B's
// link to NATS is cut while node A serves a tag and reserves new ranges;
// B misses A's announcements (leaf.floor.<tag>). Once B is back, an
// operator writes max_id twice at the highest floor B knew before the
// cut. B must not serve the ids A served meanwhile: after the reconnect
// it asked the live nodes for their floors again, as at start.
func TestLoweredTwiceAfterLostAnnouncement(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	store := config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}
	a := startNode(t, config.Config{Name: "la", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: store})
	b := startNode(t, config.Config{Name: "lb", NATS: config.NATSConfig{URL: "nats://" + p.Listen}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: store})
	nc := natstest.Connect(t, s.ClientURL())
	seen := map[int64]string{}
	takeAll := func(what string, n int, mayFail bool) {
		t.Helper()
		for i, fails := 0, 0; i < n; i++ {
			ids, err := take(nc, "lost", 100, true)
			if err != nil {
				if mayFail || strings.Contains(err.Error(), "503") && fails < 50 {
					fails++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				t.Fatalf("%s: take %d: %v", what, i, err)
			}
			for _, id := range ids {
				if w, ok := seen[id]; ok {
					t.Fatalf("%s: id %d handed out twice (first %s)", what, id, w)
				}
				seen[id] = what
			}
		}
	}
	takeAll("before the cut", 60, false)
	settleFloors(t, "lost", a, b)
	low := max(b.SegmentFloor("lost"), b.PeerFloor("lost")) // what B knows

	p.Stop() // B's link cut
	testenv.Eventually(t, "B away from NATS", 10*time.Second, func() bool {
		_, err := take(nc, "lost", 1, true)
		return err == nil && !b.NATSConnected()
	})
	// A alone serves, and reserves two new ranges: B hears neither.
	floorA := a.SegmentFloor("lost")
	for i := 0; a.SegmentFloor("lost") < floorA+2000; i++ {
		if i > 500 {
			t.Fatalf("A's floor stayed at %d while B was away", a.SegmentFloor("lost"))
		}
		takeAll("while B was away", 1, true)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	// Once B is back and has asked, it knows A's floor.
	testenv.Eventually(t, "B back on NATS", 20*time.Second, func() bool { return b.NATSConnected() })
	high := a.SegmentFloor("lost")
	deadline := time.Now().Add(10 * time.Second)
	for b.PeerFloor("lost") < high && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("B knew %d before the cut; A's floor is %d; B heard %d after the reconnect", low, high, b.PeerFloor("lost"))

	kv, ctx := allocBucket(t, nc)
	row := []byte(`{"max_id":` + strconv.FormatInt(low, 10) + `,"step":1000}`)
	for range 2 {
		if _, err := kv.Put(ctx, "lost", row); err != nil {
			t.Fatal(err)
		}
	}
	takeAll("after the row was lowered twice", 200, true)
}

// The alloc bucket is deleted and made again (by the next node to start)
// under a live node A that served a tag. A notices the store changed; a
// node B on a new data directory has no floor of the tag and no recorded
// incarnation: the store alone would let it create the tag from 1 and
// serve A's ids again. B asks the live nodes before it creates a tag, and
// A's floor refuses it.
func TestNewNodeRefusesTagAliveNodeServed(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	a := startNode(t, config.Config{Name: "ra", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	nc := natstest.Connect(t, s.ClientURL())
	var high int64
	for range 30 {
		ids, err := takeReady(nc, "lost", 100, true)
		if err != nil {
			t.Fatal(err)
		}
		high = max(high, ids[len(ids)-1])
	}
	settleFloors(t, "lost", a)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, kvstore.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	b := startNode(t, config.Config{Name: "rb", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	bc := natstest.Connect(t, s.ClientURL())
	refused := 0
	for i := range 40 {
		ids, err := take(bc, "lost", 100, true)
		if err != nil {
			refused++
			continue
		}
		if ids[0] <= high {
			t.Fatalf("request %d: ids %d-%d of \"lost\" again, after the bucket was replaced (served up to %d before)", i, ids[0], ids[len(ids)-1], high)
		}
	}
	kv, ctx2 := allocBucket(t, nc)
	if e, err := kv.Get(ctx2, "lost"); err == nil {
		t.Fatalf("the replaced bucket holds %q = %s: a node created the tag again", "lost", e.Value())
	}
	t.Logf("%d of 40 requests refused; B's floor %d", refused, b.SegmentFloor("lost"))
}

// A node that starts after its peers' last loads has heard none of their
// announcements; it asks the live nodes for every floor at start
// (leaf.admin.floors). Here the row is lowered twice by hand, then node B
// joins: before, B took the lowered range and served A's ids again.
func TestLateNodeLearnsPeerFloors(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	a := startNode(t, config.Config{Name: "la", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	nc := natstest.Connect(t, s.ClientURL())
	seen := map[int64]bool{}
	takeAll := func(what string, n int, mayFail bool) {
		t.Helper()
		for i := 0; i < n; i++ {
			// Refusals are expected once the row is lowered ("below the
			// ids already issued", a 503 that takeReady would ask again
			// for 10 s): one try each.
			get := takeReady
			if mayFail {
				get = take
			}
			ids, err := get(nc, "late", 100, true)
			if err != nil {
				if mayFail {
					continue
				}
				t.Fatalf("%s: take %d: %v", what, i, err)
			}
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("%s: id %d handed out twice", what, id)
				}
				seen[id] = true
			}
		}
	}
	takeAll("before", 40, false)
	settleFloors(t, "late", a)
	kv, ctx := allocBucket(t, nc)
	for range 2 {
		if _, err := kv.Put(ctx, "late", []byte(`{"max_id":1001,"step":1000}`)); err != nil {
			t.Fatal(err)
		}
	}
	startNode(t, config.Config{Name: "lb", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}})
	takeAll("after the row was lowered twice and a node joined", 60, true)
}

// TestRestartingNodeFloorsHeard: a node restarting on its data directory
// holds ranges of a tag (its floor file; engine.Start loads more) long
// before its responder runs — here it hangs registering a snowflake worker
// with ZooKeeper, as a node 30-50 ms from NATS spends seconds in its
// start's round trips. The alloc bucket is replaced and a newcomer is
// asked for the tag: it must hear the restarting node's floor and refuse,
// not create the tag at 1. So the restarting member's record says it
// serves (the newcomer waits for it) and it answers its floors from
// before it joins.
func TestRestartingNodeFloorsHeard(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	url := s.ClientURL()
	dirB := t.TempDir()
	cfgB := config.Config{Name: "b", NATS: config.NATSConfig{URL: url}, DataDir: dirB, HTTP: config.HTTPConfig{Addr: "off"},
		Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000, MaxStep: 1000}}
	b := startNode(t, cfgB)
	nc := natstest.Connect(t, url)
	var high int64
	for range 5 {
		ids, err := takeReady(nc, "orders", 100, true)
		if err != nil {
			t.Fatal(err)
		}
		high = max(high, ids[len(ids)-1])
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// b again, stuck registering its snowflake worker: ZooKeeper does
	// not answer. Its engine has started by then.
	stuck := cfgB
	stuck.Registry = config.RegistryConfig{Kind: config.RegistryZK, ZK: freeAddr(t), ZKName: "stuck", ZKAddr: "127.0.0.1:7999"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, err := node.Start(ctx, stuck, nil); err == nil {
			_ = n.Close(context.Background())
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, "the restarting b in leaf_nodes", 30*time.Second, func() bool { return isMember(t, nc, "b") })
	time.Sleep(time.Second) // its engine loads the tag meanwhile (no event to wait for: it does not serve)

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(t.Context(), kvstore.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	startNode(t, config.Config{Name: "c", NATS: config.NATSConfig{URL: url}, HTTP: config.HTTPConfig{Addr: "off"},
		Registry: config.RegistryConfig{Kind: config.RegistryOff}, Store: config.StoreConfig{DefaultStep: 1000}})
	ids, err := takeReady(nc, "orders", 100, true)
	if err == nil {
		if ids[0] <= high {
			t.Fatalf("the newcomer created orders again: ids from %d, b had served up to %d", ids[0], high)
		}
		t.Fatalf("ids %d.. of a tag the replaced bucket does not hold", ids[0])
	}
	if !strings.Contains(err.Error(), "node b") {
		t.Fatalf("take after the bucket was replaced: %v, want a refusal naming node b", err)
	}
}
