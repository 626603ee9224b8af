package node

import (
	"log/slog"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/leafmq/leafmq/internal/natstest"
)

// TestConnectsFarFromNATS: a node 0.8 s (each way) from its NATS server
// connects. The handshake takes three trips one way, 2.4 s here: with
// nats.go's default 2 s timeout it never connected, and a node that lost
// its server never reconnected (helper-32's liveness finding).
func TestConnectsFarFromNATS(t *testing.T) {
	s := natstest.RunServer(t)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "nats", "127.0.0.1:0", strings.TrimPrefix(s.ClientURL(), "nats://"))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(`{"name":"far-` + stream + `","type":"latency","stream":"` + stream +
			`","toxicity":1,"attributes":{"latency":800}}`)); err != nil {
			t.Fatal(err)
		}
	}
	n := &Node{cfg: Config{Name: "far", NATS: NATSConfig{URL: "nats://" + p.Listen}}, log: slog.New(slog.DiscardHandler)}
	if err := n.startNATS(); err != nil {
		t.Fatalf("a node 0.8 s from NATS: %v", err)
	}
	n.nc.Close()
}
