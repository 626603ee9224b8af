package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/snowflake"
)

// regionConfig is node, of region name with id, in a deployment of count
// regions (0: without regions), on the NATS at url.
func regionConfig(url, node, name string, id, count int) config.Config {
	cfg := config.Config{Name: node, NATS: config.NATSConfig{URL: url}, Registry: config.RegistryConfig{Kind: config.RegistryKV}}
	if count > 0 {
		cfg.Region.Count, cfg.Region.Name = count, name
		cfg.Region.SetID(id)
		cfg.Store.AutoCreate = "true" // a new deployment of regions: no ids issued before
	}
	return cfg
}

// httpSnowflake takes one snowflake id from n itself (its Leaf HTTP API).
func httpSnowflake(t *testing.T, n *node.Node) int64 {
	t.Helper()
	return httpGetID(t, n, "/api/snowflake/get/x")
}

// TestRegions: the nodes of two regions serve ids that carry their region
// (a segment id's remainder mod the regions, a snowflake id's region
// bits), so the regions' ids never meet, on one store; a node of a third
// region on a region id another region answers for refuses to start (I5).
func TestRegions(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	layout, err := snowflake.LeafLayout().ForRegions(3)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"east", "west"} {
		n := startNode(t, regionConfig(s.ClientURL(), name+"-1", name, i, 3))
		waitServing(t, n)
		for range 3 {
			if id := httpID(t, n, "demo"); id%3 != int64(i) {
				t.Errorf("%s: segment id %d, want one ≡ %d mod 3", n.Name(), id, i)
			}
			if id := layout.Decompose(httpSnowflake(t, n)); id.Region != int64(i) {
				t.Errorf("%s: a snowflake id of region %d, want %d", n.Name(), id.Region, i)
			}
		}
	}
	err = startErr(t, regionConfig(s.ClientURL(), "south-1", "south", 1, 3))
	if !errors.Is(err, region.ErrIDTaken) || !strings.Contains(err.Error(), "west") {
		t.Fatalf("a node of region south on west's id 1: %v, want ErrIDTaken naming west", err)
	}
}

// TestRegionsBesideNone: a node with --regions beside a running node
// without regions refuses to start, and one without regions beside a
// running node with --regions stops within its check's window (their ids
// would repeat: I5); its start waits for no check (a lone node serves at
// once).
func TestRegionsBesideNone(t *testing.T) {
	t.Parallel()
	for _, first := range []int{0, 2} {
		s := natstest.RunServer(t)
		waitServing(t, startNode(t, regionConfig(s.ClientURL(), "first", "east", 0, first)))
		n, err := tryStart(t, regionConfig(s.ClientURL(), "second", "east", 0, 2-first), 60*time.Second)
		if err == nil {
			// Without regions the start waits for no check: the node
			// finds the difference within the check's window and stops.
			select {
			case err = <-n.Failed():
			case <-time.After(10 * time.Second):
			}
			_ = n.Close(context.Background())
		}
		if !errors.Is(err, region.ErrRegionsDiffer) || !strings.Contains(err.Error(), "node first") {
			t.Fatalf("--regions %d beside --regions %d: %v, want ErrRegionsDiffer naming node first", 2-first, first, err)
		}
	}
}
