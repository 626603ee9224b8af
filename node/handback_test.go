package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// TestGracefulRestartNoGap: a node alone, stopped gracefully, hands back
// what its buffers and ring held, so the tag continues right after the
// last id it served; with a peer alive it does not (the peer knows its
// floors), and no id repeats either way. On JetStream KV and MariaDB.
func TestGracefulRestartNoGap(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"kv", "mysql"} {
		t.Run(store, func(t *testing.T) {
			srv := natstest.RunServer(t)
			cfg := node.Config{Name: "alone", NATS: node.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir()}
			if store == "mysql" {
				cfg.Store.MySQL = testenv.MySQL(t)
			}
			n := startNode(t, cfg)
			nc := natstest.Connect(t, n.ClientURL())
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100})
			var last int64
			for range 37 {
				ids, err := takeReady(nc, "orders", 1, false)
				if err != nil {
					t.Fatal(err)
				}
				if ids[0] <= last {
					t.Fatalf("id %d after %d", ids[0], last)
				}
				last = ids[0]
			}
			nc.Close()
			if err := n.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			n = startNode(t, cfg)
			nc = natstest.Connect(t, n.ClientURL())
			ids, err := takeReady(nc, "orders", 3, false)
			if err != nil {
				t.Fatal(err)
			}
			if ids[0] != last+1 {
				t.Fatalf("after a graceful restart: ids %v, want %d next (no gap)", ids, last+1)
			}
			last = ids[2]

			// With a peer alive, nothing is handed back: the peer goes on
			// above everything the stopped node reserved.
			nc.Close()
			if err := n.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			n = startNode(t, cfg)
			peer := startNode(t, node.Config{Name: "peer", NATS: node.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir(), Store: node.StoreConfig{MySQL: cfg.Store.MySQL}})
			nc = natstest.Connect(t, srv.ClientURL())
			seen := map[int64]bool{}
			for range 20 {
				ids, err := takeReady(nc, "orders", 1, false)
				if err != nil {
					t.Fatal(err)
				}
				seen[ids[0]] = true
				last = max(last, ids[0])
			}
			if err := n.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				ids, err := takeReady(nc, "orders", 1, false)
				if err != nil {
					t.Fatal(err)
				}
				if seen[ids[0]] {
					t.Fatalf("id %d handed out twice", ids[0])
				}
				seen[ids[0]] = true
			}
			_ = peer
		})
	}
}

// TestGracefulRestartsWithPoolNoRepeat: a lone node with a batch pool,
// restarted gracefully again and again (each stop hands back what its
// buffers and ring hold) while ids are taken by requests of every size and
// from the pool: no id repeats, and pool batches made before a stop stay
// valid after it.
func TestGracefulRestartsWithPoolNoRepeat(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	cfg := node.Config{Name: "alone", NATS: node.NATSConfig{URL: srv.ClientURL()}, DataDir: t.TempDir(), Pool: node.PoolConfig{Tags: "orders", Depth: 4, Batch: 50}}
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	add := func(ids []int64, from string) {
		t.Helper()
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("id %d handed out twice (%s)", id, from)
			}
			seen[id] = true
		}
	}
	for round := range 5 {
		n := startNode(t, cfg)
		if round == 0 {
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100})
		}
		for i := range 40 {
			ids, err := takeReady(nc, "orders", 1+(i*37)%300, i%2 == 0)
			if err != nil {
				t.Fatal(err)
			}
			add(ids, "request")
		}
		for range 3 {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			ids, err := pool.Take(ctx, js, pool.SegmentSubject("orders"), 2*time.Second)
			cancel()
			if err == nil {
				add(ids, "pool")
			}
		}
		if err := n.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < 5*40 {
		t.Fatalf("only %d ids taken", len(seen))
	}
}
