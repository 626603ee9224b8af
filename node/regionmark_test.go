package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/datadir"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/segment"
)

// TestRegionDataDirRefusesChange: a node restarted on its data directory
// with another region id, region count or name, or without regions,
// refuses to start, though no live node is there to compare with (the
// whole region restarted): its floors count the local numbers of the
// region it served, and the ids would repeat (two regions swapping their
// ids, or --regions 3 to 4, repeated tens of thousands of ids; a renamed
// region was ready while refusing every tag). Unchanged, it starts.
func TestRegionDataDirRefusesChange(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	dir := t.TempDir()
	cfgOf := func(name string, id, count int) config.Config {
		cfg := regionConfig(s.ClientURL(), "n1", name, id, count)
		cfg.DataDir, cfg.Registry.Kind = dir, config.RegistryOff
		return cfg
	}
	n := startNode(t, cfgOf("east", 0, 2))
	httpID(t, n, "orders")
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what     string
		cfg      config.Config
		mentions string
	}{
		{"another region id", cfgOf("east", 1, 2), "region's id never changes"},
		{"another region count", cfgOf("east", 0, 3), "fixed for the deployment's life"},
		{"another name", cfgOf("east2", 0, 2), "renamed region"},
		{"no regions", cfgOf("", 0, 0), "--regions 2 --region-id 0 --region east"},
	} {
		err := startErr(t, c.cfg)
		if !errors.Is(err, datadir.ErrRegion) || !strings.Contains(err.Error(), c.mentions) {
			t.Fatalf("restarted with %s: %v; want datadir.ErrRegion saying %q", c.what, err, c.mentions)
		}
	}
	if id := httpID(t, startNode(t, cfgOf("east", 0, 2)), "orders"); id%2 != 0 {
		t.Fatalf("id %d of region 0 of 2", id)
	}
}

// TestRegionStoreRefusesOtherRegion: a region's bucket records the region
// it serves; a node of another region id or region count given that
// bucket (here: by its name) refuses it, even on a data directory of its
// own and with no node of the region alive.
func TestRegionStoreRefusesOtherRegion(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	cfg := regionConfig(s.ClientURL(), "east-1", "east", 0, 2)
	cfg.Registry.Kind = config.RegistryOff
	n := startNode(t, cfg)
	httpID(t, n, "orders")
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, count int }{{1, 2}, {0, 3}} {
		cfg := regionConfig(s.ClientURL(), "east-2", "east", c.id, c.count)
		cfg.Registry.Kind = config.RegistryOff
		err := startErr(t, cfg)
		if !errors.Is(err, segment.ErrRegionMark) || !strings.Contains(err.Error(), "each region needs its own store") {
			t.Fatalf("a node of region id %d of %d on region 0's bucket: %v; want segment.ErrRegionMark", c.id, c.count, err)
		}
	}
}

// TestRegionsOneDatabaseRefused: two regions given one MySQL database
// would serve one row of every tag, and a monotonic tag in it gets a
// leader in each region (ids out of order): the second region refuses
// the database the first recorded, and so does a node without regions.
func TestRegionsOneDatabaseRefused(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQL(t)
	s := natstest.RunServer(t)
	cfgOf := func(node, name string, id, count int) config.Config {
		cfg := regionConfig(s.ClientURL(), node, name, id, count)
		cfg.Registry.Kind, cfg.Store.MySQL = config.RegistryOff, dsn
		return cfg
	}
	east := startNode(t, cfgOf("east-1", "east", 0, 2))
	httpID(t, east, "orders")
	err := startErr(t, cfgOf("west-1", "west", 1, 2))
	if !errors.Is(err, segment.ErrRegionMark) || !strings.Contains(err.Error(), "region east") {
		t.Fatalf("region west on region east's database: %v; want segment.ErrRegionMark naming east", err)
	}
	if err := east.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := startErr(t, cfgOf("none-1", "", 0, 0)); !errors.Is(err, segment.ErrRegionMark) {
		t.Fatalf("a node without regions on region east's database: %v; want segment.ErrRegionMark", err)
	}
}

// TestRegionStoreRecordWhileRunning: a running node checks its store's
// record every period with the region check: a record an operator deleted
// (the store's key, the region id's bucket) is written again, and another region's record put in its place (a
// second region given the store meanwhile) stops the node (leafd exits).
// Before, a second region could start on a store whose record was deleted
// by hand while the first served from it: a monotonic tag then had a
// leader in each region, its ids out of order.
func TestRegionStoreRecordWhileRunning(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	n := startNode(t, regionConfig(s.ClientURL(), "east-1", "east", 0, 2))
	waitServing(t, n)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "leaf_alloc_east")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), "leafmq.region"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the region record written again", 30*time.Second, func() bool {
		e, err := kv.Get(t.Context(), "leafmq.region")
		return err == nil && strings.Contains(string(e.Value()), `"region":"east"`)
	})
	// The region id's record too, its bucket deleted by hand. Before, the
	// bucket stayed gone, and once the region was retired a region given
	// its id on a new store started and repeated its ids.
	if err := js.DeleteKeyValue(t.Context(), "leaf_region_0"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the region id record written again", 30*time.Second, func() bool {
		ids, err := js.KeyValue(t.Context(), "leaf_region_0")
		if err != nil {
			return false
		}
		e, err := ids.Get(t.Context(), "region")
		return err == nil && strings.Contains(string(e.Value()), `"region":"east"`)
	})
	if _, err := kv.Put(t.Context(), "leafmq.region", []byte(`{"regions":2,"region_id":1,"region":"west"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.Failed():
		if !errors.Is(err, segment.ErrRegionMark) {
			t.Fatalf("stopped for %v, want segment.ErrRegionMark", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after its store was recorded as another region's")
	}
}

// TestRegionIDRecorded: a region id records its region (KV: the bucket
// leaf_region_<id>): a region renamed onto fresh data directories, or a
// new region given a retired region's id, starts on a new, empty bucket
// of its own name, which says nothing of the ids the id served before;
// the id's record refuses it. Before, such a region served its tags from
// 1 again (a rename with auto-create repeated 2,351 of 2,351 ids).
func TestRegionIDRecorded(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	n := startNode(t, regionConfig(s.ClientURL(), "east-1", "east", 0, 2))
	httpID(t, n, "orders")
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := startErr(t, regionConfig(s.ClientURL(), "east2-1", "east2", 0, 2))
	if !errors.Is(err, segment.ErrRegionMark) || !strings.Contains(err.Error(), "leaf_region_0") {
		t.Fatalf("region id 0 renamed east2 on a fresh data directory: %v; want segment.ErrRegionMark naming leaf_region_0", err)
	}
	httpID(t, startNode(t, regionConfig(s.ClientURL(), "west-1", "west", 1, 2)), "orders")
	httpID(t, startNode(t, regionConfig(s.ClientURL(), "east-2", "east", 0, 2)), "orders")
}
