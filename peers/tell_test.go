package peers_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/wire"
)

// TestTellWaitsForEveryMember: Tell returns once every live member
// answered, a slow one included, and fails naming a member that does not
// answer within its context.
func TestTellWaitsForEveryMember(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := member(t, url, "a", wire.NodeStatus{}, 0)
	c := member(t, url, "c", wire.NodeStatus{}, 0)
	const delay = 300 * time.Millisecond
	nc := natstest.Connect(t, url)
	sub, err := nc.Subscribe(wire.TagChangedPrefix+"t", func(m *nats.Msg) {
		time.Sleep(delay)
		b, _ := json.Marshal(map[string]string{"node": "a", "instance": a.Instance()})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := c.Tell(ctx, wire.TagChangedPrefix+"t"); err != nil {
		t.Fatalf("Tell: %v", err)
	}
	if took := time.Since(began); took < delay {
		t.Fatalf("Tell returned after %v, before the slow member answered (%v)", took, delay)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if err := c.Tell(short, wire.TagChangedPrefix+"t"); !errors.Is(err, peers.ErrSilent) {
		t.Fatalf("Tell beside a member that does not answer: %v, want ErrSilent", err)
	}
}
