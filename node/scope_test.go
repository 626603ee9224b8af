package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// scopedBuckets are the buckets a node of a region keeps as its region's
// own (wire.Scope.Bucket).
var scopedBuckets = []string{"leaf_alloc", "leaf_nodes", "leaf_mono"}

// TestRegionScope: two regions on one NATS server each keep their own
// store, members and monotonic leases (leaf_alloc_<region>, …, and no
// bucket of the unscoped names), hear no floor of the other (a tag far
// ahead in east's store leaves west's ids of it low: west's auto-create
// asks west's nodes only), and gather their own region's nodes only,
// while leaf.admin.status still lists every node of every region.
func TestRegionScope(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	names := []string{"east", "west"}
	nodes := map[string]*node.Node{}
	for i, name := range names {
		nodes[name] = startNode(t, regionConfig(s.ClientURL(), name+"-1", name, i, 2))
		waitServing(t, nodes[name])
	}
	nc := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, b := range scopedBuckets {
		for _, name := range names {
			if _, err := js.KeyValue(ctx, b+"_"+name); err != nil {
				t.Errorf("bucket %s_%s: %v", b, name, err)
			}
		}
		if _, err := js.KeyValue(ctx, b); !errors.Is(err, jetstream.ErrBucketNotFound) {
			t.Errorf("bucket %s of no region: %v, want none", b, err)
		}
	}

	east, err := kvstore.Open(ctx, js, kvstore.Options{Bucket: "leaf_alloc_east"})
	if err != nil {
		t.Fatal(err)
	}
	defer east.Close()
	const far = 1_000_000
	if err := east.Create(ctx, segment.Tag{Name: wire.MustTag("far"), MaxID: far, Step: 10}); err != nil {
		t.Fatal(err)
	}
	if id := httpID(t, nodes["east"], "far"); id < 2*far || id%2 != 0 {
		t.Fatalf("east's id of far %d, want one ≥ %d, even", id, 2*far)
	}
	if f := nodes["east"].SegmentFloor("far"); f <= far {
		t.Fatalf("east's floor of far %d, want above %d", f, far)
	}
	for range 3 {
		if id := httpID(t, nodes["west"], "far"); id >= 1000 || id%2 != 1 {
			t.Fatalf("west's id of far %d: want a low odd one (west's own counter, no floor of east's)", id)
		}
	}

	for _, name := range names {
		sts, err := ask.Status(ctx, nc, wire.Scope(name), 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) != 1 || sts[0].Node != name+"-1" {
			t.Errorf("region %s's status gather: %v, want %s-1 alone", name, nodeNames(sts), name)
		}
	}
	sts, err := ask.Status(ctx, nc, "", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 {
		t.Errorf("leaf.admin.status: %v, want every region's node", nodeNames(sts))
	}
}

func nodeNames(sts []wire.NodeStatus) []string {
	var out []string
	for _, st := range sts {
		out = append(out, st.Node)
	}
	return out
}

// TestRegionsCut: two regions, each a NATS cluster of a supercluster,
// each a node named after its cluster: each region's buckets are placed in
// its own cluster, so while the gateway is cut each region keeps serving a
// tag, new ranges included (step 10, hundreds of ids), and no id of the two
// regions repeats before, during or after the cut.
func TestRegionsCut(t *testing.T) {
	sc := natstest.RunSuperCluster(t, 1, 1)
	var nodes []*node.Node
	for i := range 2 {
		cfg := regionConfig(sc.URL(i), fmt.Sprintf("r%d-1", i), "", i, 2)
		cfg.Store.DefaultStep, cfg.Store.MaxStep = 10, 10
		n := startNode(t, cfg)
		waitServing(t, n)
		nodes = append(nodes, n)
	}
	// A client in each region: the queue group answers from its own
	// cluster first, and during the cut from nowhere else.
	var ncs []*nats.Conn
	for i := range nodes {
		ncs = append(ncs, natstest.Connect(t, sc.URL(i)))
	}
	seen := map[int64]string{}
	take := func(phase string, batches int) {
		t.Helper()
		for i, n := range nodes {
			for range batches {
				ids, err := takeReady(ncs[i], "orders", 10, false)
				if err != nil {
					t.Fatalf("%s, region of %s: %v", phase, n.Name(), err)
				}
				for _, id := range ids {
					if id%2 != int64(i) {
						t.Fatalf("%s, region of %s: id %d of another region's remainder", phase, n.Name(), id)
					}
					if prev, dup := seen[id]; dup {
						t.Fatalf("%s, region of %s: id %d again (first %s)", phase, n.Name(), id, prev)
					}
					seen[id] = phase + " " + n.Name()
				}
			}
		}
	}
	take("before the cut", 2)
	sc.Cut(0)
	sc.Cut(1)
	// More ids than a node's ring holds (256 at first): the ranges come
	// from the store during the cut.
	var before [2]int64
	for i, n := range nodes {
		before[i] = n.SegmentFloor("orders")
	}
	take("during the cut", 40)
	for i, n := range nodes {
		if got := n.SegmentFloor("orders") - before[i]; got < 40 {
			t.Errorf("%s: %d local numbers of new ranges during the cut, want more than 3 ranges of 10", n.Name(), got)
		}
	}
	sc.Heal(0)
	sc.Heal(1)
	take("after the heal", 2)

	nc := natstest.Connect(t, sc.URL(0))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range sc.Names {
		for _, b := range scopedBuckets {
			stream := "KV_" + b + "_" + cluster
			var info *jetstream.StreamInfo
			testenv.Eventually(t, "the info of "+stream, 30*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				st, err := js.Stream(ctx, stream)
				if err == nil {
					info, err = st.Info(ctx)
				}
				return err == nil && info.Cluster != nil
			})
			if info.Cluster.Name != cluster {
				t.Errorf("%s placed in cluster %s, want its region's %s", stream, info.Cluster.Name, cluster)
			}
		}
	}
}

// TestRegionsUpgradeKeepsFloors: a node that served a tag without regions
// and restarts on its data directory with --regions takes its ranges from
// its region's empty bucket: it refuses to auto-create the tag there (its
// own floor counts) until an operator creates it at the old max_id, and
// then serves above every id it served before.
func TestRegionsUpgradeKeepsFloors(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	dir := t.TempDir()
	cfg := config.Config{Name: "n1", DataDir: dir, NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}}
	n := startNode(t, cfg)
	var high int64
	for range 5 {
		high = max(high, httpID(t, n, "orders"))
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := maxID(t, s.ClientURL(), "", "orders")

	cfg = regionConfig(s.ClientURL(), "n1", "east", 0, 2)
	cfg.DataDir, cfg.Registry.Kind = dir, config.RegistryOff
	startNode(t, cfg)
	if ids, err := takeReady(nc, "orders", 1, false); err == nil {
		t.Fatalf("a tag this node served, auto-created in its region's empty bucket: ids %v", ids)
	}
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", MaxID: old})
	ids, err := takeReady(nc, "orders", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] <= high || ids[0]%2 != 0 {
		t.Fatalf("id %d after the upgrade, want an even one above %d", ids[0], high)
	}
}
