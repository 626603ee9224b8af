package ask_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// answer makes a connection answer subject with each of replies (JSON).
func answer(t *testing.T, url, subject string, replies ...any) {
	t.Helper()
	for _, r := range replies {
		nc := natstest.Connect(t, url)
		b, _ := json.Marshal(r)
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(b) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatusFloorsClocks(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	answer(t, url, wire.StatusSubject, wire.NodeStatus{Node: "b"}, wire.NodeStatus{Node: "a"}, wire.NodeStatus{})
	answer(t, url, wire.FloorPrefix+"orders",
		wire.NodeFloor{Node: "a", Tag: "orders", Floor: 4001}, wire.NodeFloor{Node: "b", Tag: "orders", Floor: 9001},
		wire.NodeFloor{Node: "c", Tag: "other", Floor: 99999}) // an answer about another tag does not count
	now := time.Now()
	answer(t, url, wire.TimeSubject,
		wire.NodeTime{Node: "self", UnixNano: now.Add(time.Hour).UnixNano()},
		wire.NodeTime{Node: "peer", UnixNano: now.Add(2 * time.Second).UnixNano()})
	nc := natstest.Connect(t, url)
	ctx := context.Background()

	st, err := ask.Status(ctx, nc, "", 300*time.Millisecond)
	if err != nil || len(st) != 2 || st[0].Node != "a" || st[1].Node != "b" {
		t.Fatalf("Status = %+v, %v; want a and b, sorted, the nameless answer dropped", st, err)
	}
	high, who, err := ask.Floors(ctx, nc, "", wire.MustTag("orders"), 300*time.Millisecond)
	if err != nil || high != 9001 || who != "b" {
		t.Fatalf("Floors = %d, %q, %v; want 9001 from b", high, who, err)
	}
	fixed := func() time.Time { return now }
	pc, err := ask.PeerClocksBut(ctx, nc, "", 300*time.Millisecond, fixed, "self")
	if err != nil || len(pc.Peers) != 1 || pc.Peers[0] != "peer" || pc.Offset != 2*time.Second {
		t.Fatalf("PeerClocksBut(self) = %+v, %v; want only peer, 2s ahead", pc, err)
	}
	if pc, _ := ask.PeerClocks(ctx, nc, "", 300*time.Millisecond, fixed); len(pc.Peers) != 2 {
		t.Fatalf("PeerClocks = %+v; want both", pc)
	}
}

// TestAdmin: a reply is decoded, an error reply is its wire error, and no
// responder is ErrNoLeafd.
func TestAdmin(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	sub, err := nc.Subscribe("leaf.admin.t", func(m *nats.Msg) {
		var req struct{ N int }
		_ = json.Unmarshal(m.Data, &req)
		if req.N < 0 {
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(micro.ErrorCodeHeader, "404")
			reply.Header.Set(micro.ErrorHeader, "no such thing")
			_ = m.RespondMsg(reply)
			return
		}
		_ = m.Respond(fmt.Appendf(nil, `{"n":%d}`, 2*req.N))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := t.Context()
	var out struct{ N int }
	if err := ask.Admin(ctx, nc, "leaf.admin.t", struct{ N int }{21}, &out); err != nil || out.N != 42 {
		t.Fatalf("Admin = %+v, %v; want 42", out, err)
	}
	var we *wire.Error
	if err := ask.Admin(ctx, nc, "leaf.admin.t", struct{ N int }{-1}, &out); !errors.As(err, &we) || we.Code != "404" {
		t.Fatalf("Admin of an error reply = %v, want its 404", err)
	}
	if err := ask.Admin(ctx, nc, "leaf.admin.none", nil, &out); !errors.Is(err, ask.ErrNoLeafd) {
		t.Fatalf("Admin without a responder = %v, want ErrNoLeafd", err)
	}
}
