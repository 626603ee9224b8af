package peers

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/wire"
)

// floorSet is a started, joined Set on nc that keeps floors (HearFloors),
// with own as its floors.
func floorSet(t *testing.T, nc *nats.Conn, name string, own *ownFloors) *Set {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst := NewInstance()
	s, err := New(Config{
		Conn: nc, Name: name, Instance: inst, Log: slog.New(slog.DiscardHandler),
		Status: func() wire.NodeStatus { return wire.NodeStatus{Node: name, Instance: inst} },
		Floor:  own.floor,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.HearFloors(ctx, Floors{Store: "inc", All: own.all, Modes: func() map[string]string { return nil }}); err != nil {
		t.Fatal(err)
	}
	return s
}

// ownFloors is a node's own floors, as its floor file would keep them.
type ownFloors struct {
	mu sync.Mutex
	m  map[string]int64
}

func (o *ownFloors) floor(tag string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[tag]
}

func (o *ownFloors) all() map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]int64, len(o.m))
	for k, v := range o.m {
		out[k] = v
	}
	return out
}

func (o *ownFloors) raise(tag string, f int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[tag] = max(o.m[tag], f)
}

// TestReconnectGathersFloorsAgain (I1, docs/protocol.md): node B's link
// to NATS is cut while node A reserves a range and announces its floor; B
// never hears the announcement. Once B is connected again it asks the
// live nodes for their floors (Reconnected), as at start, and knows A's:
// a max_id lowered twice below it afterwards cannot grant B A's ids.
func TestReconnectGathersFloorsAgain(t *testing.T) {
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	ncA := natstest.Connect(t, s.ClientURL())
	ncB := natstest.Connect(t, "nats://"+p.Listen, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	ownA, ownB := &ownFloors{m: map[string]int64{}}, &ownFloors{m: map[string]int64{}}
	a := floorSet(t, ncA, "a", ownA)
	b := floorSet(t, ncB, "b", ownB)
	floor := func() int64 { f, _ := b.Floor("t"); return f }

	// Heard while connected.
	ownA.raise("t", 1000)
	a.Announce("t", 1000, "segment")
	testenv.Eventually(t, "B hears A's first floor", 5*time.Second, func() bool { return floor() == 1000 })

	p.Stop() // B's link cut: its connection and every new one refused
	testenv.Eventually(t, "B disconnected", 5*time.Second, func() bool { return !ncB.IsConnected() })
	// From the loss on, B may be missing an announcement: it refuses
	// until it has asked the live nodes again.
	testenv.Eventually(t, "B's floors stale", 5*time.Second, func() bool { _, err := b.Floor("t"); return errors.Is(err, ErrFloorsStale) })
	ownA.raise("t", 5000)
	a.Announce("t", 5000, "segment") // lost to B
	if err := ncA.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "B reconnected", 10*time.Second, func() bool { return ncB.IsConnected() })
	testenv.Eventually(t, "B knows A's floor announced while B was away", 10*time.Second, func() bool {
		f, err := b.Floor("t")
		if err == nil && f != 5000 {
			t.Fatalf("B's floor of t is %d after the reconnect, before it asked A again: A announced 5000 meanwhile", f)
		}
		return err == nil && f == 5000
	})
}
