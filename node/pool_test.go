package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// Nodes keep the pools full; with every leafd stopped, clients still get
// ids from the pools until they drain — none of them seen before.
func TestPoolOutlivesNodes(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	var nodes []*node.Node
	for i, w := range []int64{1, 2} {
		nodes = append(nodes, startNode(t, config.Config{
			Name:     []string{"pa", "pb"}[i],
			NATS:     config.NATSConfig{URL: s.ClientURL()},
			Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: w},
			Pool:     config.PoolConfig{Tags: "orders,snowflake", Depth: 6, Batch: 100},
		}))
	}
	nc := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	record := func(ids []int64) {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("id %d seen twice", id)
			}
			seen[id] = true
		}
	}
	for range 5 {
		ids, err := takeReady(nc, "orders", 50, true)
		if err != nil {
			t.Fatal(err)
		}
		record(ids)
		ids, err = takeFrom(nc, wire.SnowflakeSubject, 50, true)
		if err != nil {
			t.Fatal(err)
		}
		record(ids)
	}
	subjects := []string{pool.SegmentSubject("orders"), pool.SnowflakeSubject}
	st, err := js.Stream(context.Background(), pool.Stream)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, subject := range subjects {
		for {
			info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
			if err == nil && info.State.Subjects[subject] == 6 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool %s not full: %v", subject, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, n := range nodes {
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := take(nc, "orders", 1, false); err == nil {
		t.Fatal("a node still answers")
	}
	for _, subject := range subjects {
		batches := 0
		for {
			ids, err := pool.Take(context.Background(), js, subject, 200*time.Millisecond)
			if errors.Is(err, pool.ErrEmpty) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", subject, err)
			}
			if len(ids) != 100 {
				t.Fatalf("%s: batch of %d", subject, len(ids))
			}
			record(ids)
			batches++
		}
		if batches != 6 {
			t.Errorf("%s: %d batches after the nodes stopped, want the 6 of a full pool", subject, batches)
		}
	}
}
