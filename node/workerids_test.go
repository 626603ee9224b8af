package node_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

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
// ids of the region's KV bucket; each one's gauge and status show the
// region's capacity (Leaf's 10 worker bits, one of them the region's for
// two regions: 512) less the two; once one stops (its claim purged), the
// other counts one more free.
func TestSnowflakeWorkerIDsFree(t *testing.T) {
	defer node.SetWorkerCountEvery(50 * time.Millisecond)()
	s := natstest.RunServer(t)
	a := startNode(t, regionConfig(s.ClientURL(), "free-a", "east", 0, 2))
	b := startNode(t, regionConfig(s.ClientURL(), "free-b", "east", 0, 2))
	waitServing(t, a)
	waitServing(t, b)
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
		if want := fmt.Sprintf(`"workers_free":%d,"workers_cap":%d`, capacity-2, capacity); !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(status) {
			t.Fatalf("%s: /status.json lacks %s:\n%s", n.Name(), want, status)
		}
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "free worker ids at capacity-1 after a node stopped", 10*time.Second, func() bool {
		return scrapeGauge(t, a, free) == capacity-1
	})
}
