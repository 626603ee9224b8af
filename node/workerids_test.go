package node_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
)

// scrapeGauge is the value of the series name{labels} on n's /metrics, -1
// when it is absent.
func scrapeGauge(t *testing.T, n *node.Node, series string) float64 {
	t.Helper()
	body := httpBody(t, "http://"+n.HTTPAddr()+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// TestSnowflakeWorkerIDsFree: two nodes of region east hold two worker
// ids of the region's registry; each one's gauge and status show the
// region's capacity (Leaf's 10 worker bits, one of them the region's for
// two regions: 512) less the two. Once one stops, KV counts its id free
// (its claim purged); ZooKeeper and MySQL never hand an id out again, so
// they still count it.
func TestSnowflakeWorkerIDsFree(t *testing.T) {
	defer node.SetWorkerCountEvery(50 * time.Millisecond)()
	for _, tc := range []struct {
		name string
		// registry sets a test's registry in node i's config.
		registry  func(t *testing.T) func(cfg *config.Config, i int)
		afterStop int
	}{
		{"kv", func(*testing.T) func(*config.Config, int) { return func(*config.Config, int) {} }, 511},
		{"zk", func(t *testing.T) func(*config.Config, int) {
			zk, name := testenv.ZooKeeper(t), testenv.RandomName("free", 6)
			return func(cfg *config.Config, i int) {
				cfg.Registry = config.RegistryConfig{Kind: config.RegistryZK, ZK: zk, ZKName: name, ZKAddr: fmt.Sprintf("127.0.0.1:%d", 7100+i)}
			}
		}, 510},
		{"mysql", func(t *testing.T) func(*config.Config, int) {
			dsn := testenv.MySQL(t)
			return func(cfg *config.Config, _ int) {
				cfg.Registry, cfg.Store.MySQL = config.RegistryConfig{Kind: config.RegistryMySQL}, dsn
			}
		}, 510},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := tc.registry(t)
			s := natstest.RunServer(t)
			var nodes []*node.Node
			for i, name := range []string{"free-a", "free-b"} {
				cfg := regionConfig(s.ClientURL(), name, "east", 0, 2)
				set(&cfg, i)
				nodes = append(nodes, startNode(t, cfg))
			}
			a, b := nodes[0], nodes[1]
			waitServing(t, a)
			waitServing(t, b)
			workerIDsFree(t, a, b, tc.afterStop)
		})
	}
}

func workerIDsFree(t *testing.T, a, b *node.Node, afterStop int) {
	const capacity = 512
	free, capSeries := `leafmq_snowflake_worker_ids_free{region="east"}`, `leafmq_snowflake_worker_ids_capacity{region="east"}`
	for _, n := range []*node.Node{a, b} {
		testenv.Eventually(t, n.Name()+"'s free worker ids at capacity-2", 10*time.Second, func() bool {
			return scrapeGauge(t, n, free) == capacity-2
		})
		if got := scrapeGauge(t, n, capSeries); got != capacity {
			t.Fatalf("%s: %s = %v, want %d", n.Name(), capSeries, got, capacity)
		}
		status := httpBody(t, "http://"+n.HTTPAddr()+"/status.json")
		if want := fmt.Sprintf(`"workers_free":%d,"workers_cap":%d`, capacity-2, capacity); !strings.Contains(status, want) {
			t.Fatalf("%s: /status.json lacks %s:\n%s", n.Name(), want, status)
		}
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A count taken after the stop (two periods on).
	time.Sleep(200 * time.Millisecond)
	testenv.Eventually(t, fmt.Sprintf("free worker ids at %d after a node stopped", afterStop), 10*time.Second, func() bool {
		return scrapeGauge(t, a, free) == float64(afterStop)
	})
}
