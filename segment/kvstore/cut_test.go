package kvstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// TestAdvanceWithoutMetaLeader: a region cut off from the others keeps its
// bucket's stream leader, but its servers lose JetStream's meta leader
// (one for the whole super-cluster) and refuse the API's message gets
// (503, JetStream system temporarily unavailable). Two nodes of the region
// still take ranges of one tag, each after the other's (so each must read
// the row the other wrote): the reads go to a replica and the
// compare-and-swap keeps the ranges apart. Before, every range take failed
// there, and a cut-off region ran dry once its buffers were used up.
func TestAdvanceWithoutMetaLeader(t *testing.T) {
	sc := natstest.RunSuperCluster(t, 1, 1, 1)
	var stores []*kvstore.Store
	for range 2 {
		js, err := jetstream.New(natstest.Connect(t, sc.URL(0)))
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, open(t, js, kvstore.Options{Bucket: "leaf_alloc_c0", Timeout: 3 * time.Second}))
	}
	tag := wire.MustTag("orders")
	if err := stores[0].Create(testCtx(t), segment.Tag{Name: tag, Step: 10}); err != nil {
		t.Fatal(err)
	}
	sc.Cut(0)
	sc.Cut(1)
	sc.Cut(2)
	defer func() { sc.Heal(0); sc.Heal(1); sc.Heal(2) }()
	sc.WaitNoMetaLeader(0, "KV_leaf_alloc_c0")
	last := int64(0)
	for i := range 10 {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a, err := stores[i%2].Advance(c, tag, 0, 0)
		cancel()
		if err != nil {
			t.Fatalf("range %d with c0 cut off: %v", i, err)
		}
		if a.Start() < last {
			t.Fatalf("range %d [%d, %d) overlaps the one before, ending at %d", i, a.Start(), a.End(), last)
		}
		last = a.End()
	}
	// A tag created during the cut (an operator's, or auto-create), and
	// the existing one refused again. Before, every create failed with
	// 10008 until the heal.
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stores[1].Create(c, segment.Tag{Name: wire.MustTag("lines"), Step: 10}); err != nil {
		t.Fatalf("create with c0 cut off: %v", err)
	}
	if err := stores[0].Create(c, segment.Tag{Name: tag, Step: 10}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("create of an existing tag with c0 cut off: %v, want ErrTagExists", err)
	}
}
