package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/kvworker"
	"github.com/leafmq/leafmq/wire"
)

// answers counts the answers to bare leaf.snowflake requests by kind.
type answers struct {
	ids, refused, noResponders, timeouts, other int
	lastOther                                   string
}

func (a *answers) ask(nc *nats.Conn) {
	err := askOnce(nc, wire.SnowflakeSubject)
	switch {
	case err == nil:
		a.ids++
	case errors.Is(err, wire.ErrUnavailable):
		a.refused++ // a retryable 503 (wire.Codes): an answer
	case errors.Is(err, nats.ErrNoResponders):
		a.noResponders++
	case errors.Is(err, nats.ErrTimeout):
		a.timeouts++
	default:
		a.other++
		a.lastOther = err.Error()
	}
}

func (a answers) String() string {
	return fmt.Sprintf("%d ids, %d refused (503), %d no responders, %d timeouts, %d other", a.ids, a.refused, a.noResponders, a.timeouts, a.other)
}

// TestWorkerStreamLeaderDies: three leafd on a three-server NATS cluster
// (every bucket R3); the server that leads KV_leaf_workers, the stream of
// the worker claims and time leases, is killed: its routes drop at once
// and no stepdown reaches the others, which elect a new leader only after
// the raft election timeout (4-9 s). Every bare leaf.snowflake request in
// the 20 s after gets an answer at once: ids, a retryable 503, or NATS's
// own "no responders" status while no node serves (a node that cannot
// serve leaves the queue group, so that the nodes that can take its
// share); a request in flight on the dead server may time out once. A
// node that does not serve is not ready for snowflake. From 20 s on, at
// least 99 of 100 requests get ids.
func TestWorkerStreamLeaderDies(t *testing.T) {
	t.Parallel()
	servers, to0 := cuttableCluster(t)
	url := func(i int) string { return servers[i].ClientURL() }
	// Each node knows every server, as a deployment's do: one on the
	// killed server reconnects to another.
	urls := natstest.ClientURLs(servers)
	nodes := make([]*node.Node, 3)
	for i := range 3 {
		nodes[i] = startNode(t, config.Config{Name: fmt.Sprintf("wl%d", i), NATS: config.NATSConfig{URL: urls},
			Store: config.StoreConfig{KVReplicas: 3}})
	}
	testenv.Eventually(t, "every node in the snowflake queue group", 30*time.Second, func() bool {
		for _, n := range nodes {
			if !n.SnowflakeJoined() {
				return false
			}
		}
		return true
	})
	// Server 0, the one that can be killed, leads the worker stream.
	nc := natstest.Connect(t, url(1))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := "KV_" + kvworker.DefaultBucket
	leader := func() string {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return ""
		}
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil {
			return ""
		}
		return info.Cluster.Leader
	}
	testenv.Eventually(t, "p0 leads "+stream, 30*time.Second, func() bool {
		if l := leader(); l == "p0" || l == "" {
			return l == "p0"
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(`{"placement":{"preferred":"p0"}}`), 5*time.Second)
		return leader() == "p0"
	})
	for range 20 {
		if err := askOnce(nc, wire.SnowflakeSubject); err != nil {
			t.Fatalf("before: %v", err)
		}
	}
	killed := time.Now()
	to0.close()
	servers[0].Shutdown()
	var during answers
	var lastRefused time.Duration
	dishonest := 0
	for time.Since(killed) < 20*time.Second {
		ids := during.ids
		during.ask(nc)
		if during.ids == ids {
			lastRefused = time.Since(killed)
		}
		// A node that does not serve says so.
		for _, n := range nodes[1:] {
			if n.Snowflake().State() != snowflake.StateServing {
				if _, err := n.ReadySubject(wire.SubjectSnowflake); err == nil && n.Snowflake().State() != snowflake.StateServing {
					dishonest++
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var after answers
	for range 100 {
		after.ask(nc)
	}
	t.Logf("p0 (leader of %s) killed; 20 s after: %v (the last answer without ids %v after); then: %v; new leader %s",
		stream, during, lastRefused.Round(time.Millisecond), after, leader())
	if dishonest > 0 {
		t.Errorf("%d times a node that did not serve said it was ready for snowflake", dishonest)
	}
	if during.timeouts > 1 || during.other > 0 {
		t.Errorf("silence while the worker stream elected a leader: %v (%s)", during, during.lastOther)
	}
	if after.ids < 99 {
		t.Errorf("20 s after the leader's server was killed, %v", after)
	}
}
