package peers

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	p := natstest.Proxy(t, s.ClientURL())
	nc, err := nats.Connect("nats://"+p.Listen, nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "far", Instance: "i8"}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.closed.Do(func() { close(m.stop) }) // renewals by hand
	m.wg.Wait()
	natstest.BothWays(t, p, "latency", "latency", 900)
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
