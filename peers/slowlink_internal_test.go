package peers

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestFarMemberWritesItsKeyAgain: a member 0.9 s from NATS whose key was
// deleted (lapsed, purged) writes it again on its next renewal: three
// round trips, 5.4 s here. With half the TTL for a renewal it never did,
// and the checks stopped waiting for a node that still served.
func TestFarMemberWritesItsKeyAgain(t *testing.T) {
	s := natstest.RunServer(t)
	direct := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := proxyTo(t, s.ClientURL())
	nc, err := nats.Connect("nats://"+p.Listen, nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := joinMembers(ctx, nc, 1, wire.Member{Node: "far", Instance: "i8"}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.closed.Do(func() { close(m.stop) }) // renewals by hand
	m.wg.Wait()
	bothWays(t, p, "latency", "latency", 900)
	js, err := jetstream.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.MembersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "i8"); err != nil {
		t.Fatal(err)
	}
	if err := m.renewOnce(); err != nil {
		t.Fatalf("renewal 0.9 s from NATS after the key was deleted: %v", err)
	}
	if _, err := kv.Get(ctx, "i8"); err != nil {
		t.Fatalf("the far member's key after its renewal: %v", err)
	}
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
