package node

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
)

// TestConnectsFarFromNATS: a node 0.8 s (each way) from its NATS server
// connects. The handshake takes three trips one way, 2.4 s here: with
// nats.go's default 2 s timeout it would never connect, and a node that
// lost its server would never reconnect.
func TestConnectsFarFromNATS(t *testing.T) {
	s := natstest.RunServer(t)
	p := proxyTo(t, s.ClientURL())
	bothWays(t, p, "latency", "latency", 800)
	n := &Node{cfg: config.Config{Name: "far", NATS: config.NATSConfig{URL: "nats://" + p.Listen}}, log: slog.New(slog.DiscardHandler)}
	if err := n.startNATS(); err != nil {
		t.Fatalf("a node 0.8 s from NATS: %v", err)
	}
	n.conn.nc.Close()
}

// TestBlackholedLinkIsNoticed: a link to NATS that swallows every byte
// (a partition that resets nothing) is noticed within pingEvery times
// pingsOut and a little: the connection is then down, so readiness says so
// and the client reconnects (to another server of a cluster). With
// nats.go's default pings (2 minutes, two out) the node stayed ready and
// subscribed for minutes while no request reached it.
func TestBlackholedLinkIsNoticed(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := proxyTo(t, s.ClientURL())
	n := &Node{cfg: config.Config{Name: "cut", NATS: config.NATSConfig{URL: "nats://" + p.Listen}}, log: slog.New(slog.DiscardHandler)}
	if err := n.startNATS(); err != nil {
		t.Fatal(err)
	}
	defer n.conn.nc.Close()
	bothWays(t, p, "timeout", "timeout", 0)
	cut := time.Now()
	within := pingEvery*time.Duration(pingsOut+1) + 5*time.Second
	for n.conn.nc.IsConnected() {
		if time.Since(cut) > within {
			t.Fatalf("still connected %v after the link went silent", time.Since(cut).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("noticed after %v", time.Since(cut).Round(100*time.Millisecond))
}

// proxyTo starts a Toxiproxy proxy to the NATS server at url, stopped at
// clean-up.
func proxyTo(t *testing.T, url string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "nats", "127.0.0.1:0", strings.TrimPrefix(url, "nats://"))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// bothWays adds a toxic of kind with one attribute to both directions of p.
func bothWays(t *testing.T, p *toxiproxy.Proxy, kind, attr string, value int) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
			`{"name":"%s-%s","type":%q,"stream":%q,"toxicity":1,"attributes":{%q:%d}}`, kind, stream, kind, stream, attr, value))); err != nil {
			t.Fatal(err)
		}
	}
}
