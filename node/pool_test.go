package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
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

// TestRegionPoolsCut: two regions, each a NATS cluster of a supercluster:
// each region's pool is a stream of its own (LEAF_POOL_<region>, no
// LEAF_POOL), placed in its region's cluster and filled by its node with
// its region's ids; while the gateways are cut, a client in each region
// keeps taking batches from its region's pool, three times its depth, so
// the node tops it up during the cut, and no id repeats.
func TestRegionPoolsCut(t *testing.T) {
	sc := natstest.RunSuperCluster(t, 1, 1)
	const depth = 4
	for i := range 2 {
		cfg := regionConfig(sc.URL(i), fmt.Sprintf("r%d-1", i), "", i, 2)
		cfg.Pool = config.PoolConfig{Tags: "orders,snowflake", Depth: depth, Batch: 50}
		waitServing(t, startNode(t, cfg))
	}
	var jss []jetstream.JetStream
	for i := range 2 {
		js, err := jetstream.New(natstest.Connect(t, sc.URL(i)))
		if err != nil {
			t.Fatal(err)
		}
		jss = append(jss, js)
	}
	subjects := func(i int) []string {
		s := wire.Scope(sc.Names[i])
		return []string{pool.SegmentSubjectIn(s, "orders"), pool.SnowflakeSubjectIn(s)}
	}
	// full waits until region i's pool holds depth batches of each subject
	// and answers where its stream is placed.
	full := func(phase string, i int) string {
		t.Helper()
		stream := pool.StreamIn(wire.Scope(sc.Names[i]))
		var info *jetstream.StreamInfo
		for _, subject := range subjects(i) {
			testenv.Eventually(t, phase+": "+subject+" full", 30*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				st, err := jss[i].Stream(ctx, stream)
				if err == nil {
					info, err = st.Info(ctx, jetstream.WithSubjectFilter(subject))
				}
				return err == nil && info.State.Subjects[subject] == depth
			})
		}
		if info.Cluster == nil {
			return ""
		}
		return info.Cluster.Name
	}
	for i, name := range sc.Names {
		if got := full("at start", i); got != name {
			t.Errorf("%s placed in cluster %q, want its region's %s", pool.StreamIn(wire.Scope(name)), got, name)
		}
	}
	if _, err := jss[0].Stream(t.Context(), pool.Stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream %s of no region: %v, want none", pool.Stream, err)
	}

	sc.Cut(0)
	sc.Cut(1)
	seen := map[int64]string{}
	for i := range 2 {
		for _, subject := range subjects(i) {
			for k := range 3 * depth {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				ids, err := pool.Take(ctx, jss[i], subject, 5*time.Second)
				cancel()
				if err != nil {
					t.Fatalf("during the cut, take %d of %s: %v", k, subject, err)
				}
				for _, id := range ids {
					if subject == subjects(i)[0] && id%2 != int64(i) {
						t.Fatalf("%s: id %d of another region's remainder", subject, id)
					}
					if prev, dup := seen[id]; dup {
						t.Fatalf("%s: id %d again (first from %s)", subject, id, prev)
					}
					seen[id] = subject
				}
			}
		}
		full("during the cut", i)
	}
	sc.Heal(0)
	sc.Heal(1)
}
