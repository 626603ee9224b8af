package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// With WithPool the client draws refills from the JetStream pool first, and
// keeps getting ids from it while every leafd is down, until it drains.
func TestPoolRefillsAndOutlivesLeafd(t *testing.T) {
	url := natsURL(t)
	n := startLeafd(t, url, config.Config{Pool: config.PoolConfig{Tags: "pooled,snowflake", Depth: 5, Batch: 200}})
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	waitPoolFull := func() {
		for _, subject := range []string{pool.SegmentSubject("pooled"), pool.SnowflakeSubject} {
			eventually(t, subject+" full", func() bool {
				st, err := js.Stream(context.Background(), pool.Stream)
				if err != nil {
					return false
				}
				info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
				return err == nil && info.State.Subjects[subject] == 5
			})
		}
	}
	waitPoolFull()
	c := newClient(t, url, WithPool(100*time.Millisecond), WithBatch(64, 200))
	seen := map[int64]bool{}
	take := func(what string, next func() (int64, error)) error {
		id, err := next()
		if err != nil {
			return err
		}
		if seen[id] {
			t.Fatalf("%s: id %d twice", what, id)
		}
		seen[id] = true
		return nil
	}
	ctx := ctxFor(t)
	for range 300 {
		if err := take("segment", func() (int64, error) { return c.Next(ctx, "pooled") }); err != nil {
			t.Fatal(err)
		}
		if err := take("snowflake", func() (int64, error) { return c.Snowflake(ctx) }); err != nil {
			t.Fatal(err)
		}
	}
	if c.poolTakes.Load() == 0 {
		t.Fatal("no refill came from the pool")
	}
	waitPoolFull()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every leafd is gone: ids keep coming from the pool (5 batches of 200
	// each, plus what is cached), then the client reports unavailable.
	before := c.poolTakes.Load()
	got := 0
	for {
		short, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a busy machine's pool fetch
		err := take("segment after", func() (int64, error) { return c.Next(short, "pooled") })
		cancel()
		if errors.Is(err, ErrUnavailable) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
		if got > 5000 {
			t.Fatal("more ids than the pool and the cache held")
		}
	}
	if got < 1000 || c.poolTakes.Load()-before < 5 {
		t.Fatalf("%d ids after leafd stopped, %d pool batches; want the pool's 1000", got, c.poolTakes.Load()-before)
	}
}

func TestWithPoolOption(t *testing.T) {
	if _, err := New(natstest.Connect(t, natsURL(t)), WithPool(-time.Second)); !errors.Is(err, ErrBadOption) {
		t.Fatalf("negative pool wait: %v", err)
	}
}

// A JetStream that does not answer (its stream leader being elected after a
// server died, say) must not hold refills up: the pool attempt gives up
// after poolAPITimeout and the refill asks leafd. Here the server has no
// JetStream and a subscriber swallows every JetStream API request; a bare
// responder stands in for leafd.
func TestPoolHungFallsBackToLeafd(t *testing.T) {
	s := natstest.RunServer(t, func(o *server.Options) { o.JetStream = false })
	nc := natstest.Connect(t, s.ClientURL())
	if _, err := nc.Subscribe("$JS.API.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	if _, err := nc.Subscribe(wire.SegmentPrefix+"hung", func(m *nats.Msg) {
		n, err := wire.ParseCount(m.Data, 100_000)
		if err != nil {
			t.Error(err)
			return
		}
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = next.Add(1)
		}
		var body []byte
		if m.Header.Get(wire.EncodingHeader) == wire.EncodingBinary {
			body = wire.AppendBinary(nil, ids)
		} else {
			body = wire.AppendDecimal(nil, ids)
		}
		_ = m.Respond(body)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.ClientURL(), WithPool(time.Second))
	// jetstream's own API timeout is 5s; the pool attempt must give up
	// long before that.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	id, err := c.Next(ctx, "hung")
	if err != nil || id < 1 {
		t.Fatalf("Next with a hung JetStream = %d, %v", id, err)
	}
}
