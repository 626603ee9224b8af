package node_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// TestRegionsOpaqueTag: a node of region 0 of 2 serves its opaque tag as
// ids P(l)*2 + 0, even and within the tag's width, while region 1 (its own
// NATS and store) serves the same tag name plain, odd: the regions' ids
// never meet whatever mode each region's store holds. Tag decode answers
// l*2 + 0, the id of the local number before permuting.
func TestRegionsOpaqueTag(t *testing.T) {
	t.Parallel()
	ids := map[int][]int64{}
	for r := range 2 {
		s := natstest.RunServer(t)
		cfg := regionConfig(s.ClientURL(), []string{"east-1", "west-1"}[r], []string{"east", "west"}[r], r, 2)
		cfg.Store.OpaqueKey = testOpaqueKey
		n := startNode(t, cfg)
		waitServing(t, n)
		nc := natstest.Connect(t, s.ClientURL())
		if r == 0 {
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100, Mode: "opaque", Width: 20})
		}
		for len(ids[r]) < 300 {
			got, err := takeReady(nc, "orders", 30, true)
			if err != nil {
				t.Fatal(err)
			}
			ids[r] = append(ids[r], got...)
		}
		if r == 1 {
			break
		}
		key, _ := opaque.ParseKey(testOpaqueKey)
		p, err := key.RegionPerm("orders", 20, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		id := ids[0][0]
		body, _ := json.Marshal(wire.AdminRequest{Tag: "orders", ID: id})
		reply, err := nc.Request(wire.TagDecodeSubject, body, 10*time.Second)
		if err != nil || wire.ReplyError(reply) != nil {
			t.Fatalf("decode: %v %v", err, wire.ReplyError(reply))
		}
		var d wire.TagDecoded
		if err := json.Unmarshal(reply.Data, &d); err != nil {
			t.Fatal(err)
		}
		if l, _ := p.Sequence(id / 2); d.Sequence != l*2 {
			t.Fatalf("decode(%d) = %d, want %d", id, d.Sequence, l*2)
		}
	}
	seen := map[int64]int{}
	for r, list := range ids {
		for _, id := range list {
			if id%2 != int64(r) || (r == 0 && id >= 1<<20) {
				t.Fatalf("region %d served id %d: not %d mod 2, or past 20 bits", r, id, r)
			}
			if _, dup := seen[id]; dup {
				t.Fatalf("id %d served twice", id)
			}
			seen[id] = r
		}
	}
}

// TestRegionsOpaqueTagOfOneRegion: an opaque tag created without regions
// (its mode records the bare key id, as a MySQL store keeps it across the
// move to regions) has ids anywhere in its domain, in every region's
// class: a node with regions refuses it, and a create that would continue
// one (--max-id) is refused. Before, such a node served the tag under its
// region's mapping, whose ids may repeat the old ones.
func TestRegionsOpaqueTagOfOneRegion(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := opaque.ParseKey(testOpaqueKey)
	store, err := kvstore.Open(t.Context(), js, kvstore.Options{Bucket: "leaf_alloc_east"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	old := segment.Mode{Kind: segment.KindOpaque, Width: 20, KeyID: key.ID()}
	if err := store.Create(t.Context(), segment.Tag{Name: wire.MustTag("secret"), MaxID: 5000, Step: 100, Mode: old}); err != nil {
		t.Fatal(err)
	}
	cfg := regionConfig(s.ClientURL(), "east-1", "east", 0, 2)
	cfg.Store.OpaqueKey = testOpaqueKey
	waitServing(t, startNode(t, cfg))
	// The first answers may be 503s while the tag's first load runs; the
	// load's refusal follows.
	var err2 error
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err2 = take(nc, "secret", 1, false)
		if err2 == nil || !errors.Is(err2, wire.ErrUnavailable) || strings.Contains(err2.Error(), "created without regions") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err2 == nil || !strings.Contains(err2.Error(), "created without regions") {
		t.Fatalf("an opaque tag of one region served with regions: %v, want refused", err2)
	}
	err = adminErr(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "secret2", Mode: "opaque", Width: 20, MaxID: 5000})
	if err == nil || !strings.Contains(err.Error(), "--max-id") {
		t.Fatalf("an opaque create continuing old ids with regions: %v, want refused", err)
	}
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "secret2", Mode: "opaque", Width: 20})
	if _, err := takeReady(nc, "secret2", 10, false); err != nil {
		t.Fatal(err)
	}
}
