package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/client"
	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/wire"
)

// TestMonoTagEndToEnd: a monotonic tag on three nodes: the segment subject
// refuses it naming leaf.mono.<tag>; concurrent clients get strictly
// increasing ids (checked as a history) while the leader is stopped and
// another takes over, and through HTTP; the tag's leaders spread.
func TestMonoTagEndToEnd(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	nodes := map[string]*node.Node{}
	for _, name := range []string{"m1", "m2", "m3"} {
		nodes[name] = startNode(t, config.Config{Name: name, NATS: config.NATSConfig{URL: url}})
	}
	nc := natstest.Connect(t, url)
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "ticks", Step: 50, Mode: "mono"})
	if _, err := take(nc, "ticks", 1, false); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "leaf.mono.ticks") {
		t.Fatalf("leaf.segment.ticks = %v, want a 400 naming leaf.mono.ticks", err)
	}
	cl, err := client.New(nc, client.WithMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	leader := func() string {
		for name, n := range nodes {
			if slices.Contains(n.MonoLeading(), "ticks") {
				return name
			}
		}
		return ""
	}
	testenv.Eventually(t, "a leader of ticks", 30*time.Second, func() bool { return leader() != "" })

	h, stop := monoLoad(t, cl, "ticks", 8)
	count := h.Len
	// Counts, not rates: the machine may be busy (-race, parallel tests).
	testenv.Eventually(t, "ids before the switch-over", 90*time.Second, func() bool { return count() > 1000 })
	old := leader()
	stopped := time.Now()
	if err := nodes[old].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	delete(nodes, old)
	before := count()
	testenv.Eventually(t, "ids after the switch-over", 90*time.Second, func() bool { return count() > before+1000 })
	t.Logf("leader %s stopped; %v to %d more ids; new leader %s", old, time.Since(stopped), count()-before, leader())
	stop()
	if err := h.Check(); err != nil {
		t.Fatalf("%v (in %d calls)", err, h.Len())
	}

	// The HTTP API asks the leader, wherever it is.
	var last int64
	for _, op := range h.Ops() {
		last = max(last, op.ID)
	}
	for _, n := range nodes {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/api/mono/get/ticks")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id, err := strconv.ParseInt(string(body), 10, 64)
		if resp.StatusCode != 200 || err != nil || id <= last {
			t.Fatalf("HTTP: %d %q; want an id above %d", resp.StatusCode, body, last)
		}
		last = id
	}
}

// TestMonoLeadershipSpreads: six monotonic tags, all led by the one node
// that was up when they were made, end up led two by each of three nodes
// once two more join: a node leading more than its share yields the extra
// tags, and nodes leading fewer take them first.
func TestMonoLeadershipSpreads(t *testing.T) {
	defer node.SetMonoBalanceEvery(500 * time.Millisecond)()
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	nodes := []*node.Node{startNode(t, config.Config{Name: "s1", NATS: config.NATSConfig{URL: url}})}
	nc := natstest.Connect(t, url)
	for i := range 6 {
		admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: fmt.Sprintf("t%d", i), Mode: "mono"})
	}
	testenv.Eventually(t, "s1 leading all six", 30*time.Second, func() bool { return len(nodes[0].MonoLeading()) == 6 })
	for _, name := range []string{"s2", "s3"} {
		nodes = append(nodes, startNode(t, config.Config{Name: name, NATS: config.NATSConfig{URL: url}}))
	}
	spread := func() bool {
		for _, n := range nodes {
			if len(n.MonoLeading()) != 2 {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, "two tags led by each node", 30*time.Second, spread)
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 6 {
		if _, err := cl.MonoN(context.Background(), fmt.Sprintf("t%d", i), 3); err != nil {
			t.Fatal(err)
		}
	}
}

// monoLoad has clients call tag's Mono in a loop, recording a history,
// until stop.
func monoLoad(t *testing.T, cl *client.Client, tag string, clients int) (*mono.History, func()) {
	h := mono.NewHistory()
	stop := h.Load(clients, func() ([]int64, error) {
		id, err := cl.Mono(context.Background(), tag)
		return []int64{id}, err
	}, func(err error) { t.Errorf("Mono: %v", err) })
	return h, stop
}
