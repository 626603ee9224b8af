package node_test

import (
	"testing"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/wire"
)

// TestGracefulRestartNoGap: a node alone, stopped gracefully, hands back
// what its buffers and ring held, so the tag continues right after the
// last id it served; with a peer alive it does not (the peer knows its
// floors), and no id repeats either way. On JetStream KV and MariaDB.
func TestGracefulRestartNoGap(t *testing.T) {
	for _, store := range []string{"kv", "mysql"} {
		t.Run(store, func(t *testing.T) {
			srv := natstest.RunServer(t)
			cfg := node.Config{Name: "alone", NATS: srv.ClientURL(), DataDir: t.TempDir()}
			if store == "mysql" {
				cfg.MySQL = testenv.MySQL(t)
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
			peer := startNode(t, node.Config{Name: "peer", NATS: srv.ClientURL(), DataDir: t.TempDir(), MySQL: cfg.MySQL})
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
