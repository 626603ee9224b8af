package node_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
)

// Close leaves no goroutine behind: not the producer's refills, the engine's
// loaders, the responder's workers, the HTTP server nor the NATS connection.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	for _, embedded := range []bool{false, true} {
		var url string
		if !embedded {
			url = natstest.RunServer(t).ClientURL()
		}
		time.Sleep(50 * time.Millisecond)
		before := len(ours())
		cfg := config.Config{Name: "leak", NATS: config.NATSConfig{URL: url}, HTTP: config.HTTPConfig{Addr: "127.0.0.1:0"}, DataDir: t.TempDir()}
		if embedded {
			cfg.NATS.Listen = "127.0.0.1:-1"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := node.Start(ctx, cfg, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		nc := natstest.Connect(t, n.ClientURL())
		for i := 0; i < 20; i++ {
			if _, err := takeReady(nc, "t"+string(rune('a'+i)), 1+i*100, i%2 == 0); err != nil {
				t.Fatal(err)
			}
		}
		nc.Close()
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for left := ours(); len(left) > before; left = ours() {
			if time.Now().After(deadline) {
				t.Fatalf("embedded=%v: %d goroutines of leafmq or the NATS client after Close, %d before:\n%s",
					embedded, len(left), before, strings.Join(left, "\n\n"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// ours lists the goroutines running leafmq or NATS client code. A shared
// test nats-server's own goroutines (it grows some per stream) don't count;
// the test's own goroutine does, before and after alike.
func ours() []string {
	buf := make([]byte, 1<<22)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if (strings.Contains(g, "leafmq/leafmq/") || strings.Contains(g, "nats-io/nats.go")) &&
			!strings.Contains(g, "TestCloseLeavesNoGoroutines") {
			out = append(out, g)
		}
	}
	return out
}
