package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/snowflake"
)

// startErr starts a node that is expected to refuse, and returns its error.
func startErr(t *testing.T, cfg node.Config) error {
	t.Helper()
	if cfg.HTTP == "" {
		cfg.HTTP = "127.0.0.1:0"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg, nil)
	if err == nil {
		_ = n.Close(context.Background())
		return nil
	}
	return err
}

// TestSameNameRefused (issue #12): the checks against live peers — their
// floors, worker ids and layout, and whether any is alive before a
// graceful stop hands ranges back — skip the node's own name. A second
// process under a live node's --name would be taken for that node and pass
// them all unseen, so it refuses to start, naming the live one.
func TestSameNameRefused(t *testing.T) {
	s := natstest.RunServer(t)
	base := node.Config{Name: "twin", NATS: s.ClientURL(), Registry: node.RegistryKV}
	a := startNode(t, base)
	waitServing(t, a)
	err := startErr(t, base)
	if !errors.Is(err, node.ErrConfig) || !strings.Contains(err.Error(), "node twin (pid ") || !strings.Contains(err.Error(), "--name") {
		t.Fatalf("a second node named twin beside a live one: %v, want ErrConfig naming the live one and --name", err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Gone, the name is free again.
	b := startNode(t, base)
	waitServing(t, b)
}

// TestZKCachedRegistrationAsksPeers (issue #12): with ZooKeeper
// unreachable a node registers from its cache file (Leaf's
// workerID.properties), which no owner znode guards. Another host with the
// same --zk-addr that reaches ZooKeeper gets the same worker id. Whichever
// starts second must see the other serving it and refuse; an adversary
// counted 59,214 duplicates when both served.
func TestZKCachedRegistrationAsksPeers(t *testing.T) {
	s := natstest.RunServer(t)
	base := node.Config{NATS: s.ClientURL(), Registry: node.RegistryZK, ZK: testenv.ZooKeeper(t),
		ZKName: testenv.RandomName("cache", 6), ZKAddr: "127.0.0.1:7301"}
	const unreachable = "127.0.0.1:1"
	dirA := t.TempDir()
	cfgA := base
	cfgA.Name, cfgA.DataDir = "ca", dirA
	a := startNode(t, cfgA) // writes its cache file
	waitServing(t, a)
	worker := a.Snowflake().Worker()
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// B reaches ZooKeeper: the same identity, the same worker id.
	cfgB := base
	cfgB.Name = "cb"
	b := startNode(t, cfgB)
	waitServing(t, b)
	if w := b.Snowflake().Worker(); w != worker {
		t.Fatalf("B has worker %d, A had %d: the test needs one identity", w, worker)
	}
	// A again, ZooKeeper unreachable: its cache file has the worker B serves.
	cfgA.ZK = unreachable
	err := startErr(t, cfgA)
	if !errors.Is(err, snowflake.ErrWorkerInUse) || !strings.Contains(err.Error(), "node cb") {
		t.Fatalf("A from its cache file beside B serving worker %d: %v, want ErrWorkerInUse naming node cb", worker, err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// B gone, A serves from its cache file; now a node that reaches
	// ZooKeeper is the second one.
	a = startNode(t, cfgA)
	waitServing(t, a)
	if w := a.Snowflake().Worker(); w != worker {
		t.Fatalf("A from its cache file: worker %d, want %d", w, worker)
	}
	cfgC := base
	cfgC.Name = "cc"
	err = startErr(t, cfgC)
	if !errors.Is(err, snowflake.ErrWorkerInUse) || !strings.Contains(err.Error(), "node ca") {
		t.Fatalf("C through ZooKeeper beside A serving worker %d from its cache: %v, want ErrWorkerInUse naming node ca", worker, err)
	}
}
