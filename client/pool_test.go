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
	"github.com/leafmq/leafmq/node"
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
	// Every leafd is gone: ids keep coming from the pool (the batches
	// left in it, 200 each, plus what is cached), then the client reports
	// unavailable. The client may still be taking a batch of its own
	// accord (its cache ran low in the loop above), so what is left is
	// counted after its takes are: every batch taken since is counted too.
	before := c.poolTakes.Load()
	st, err := js.Stream(context.Background(), pool.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(pool.SegmentSubject("pooled")))
	if err != nil {
		t.Fatal(err)
	}
	left := int64(info.State.Subjects[pool.SegmentSubject("pooled")])
	if left < 4 {
		t.Fatalf("%d batches left in the pool at leafd's stop, want about 5", left)
	}
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
	if taken := c.poolTakes.Load() - before; int64(got) < 200*left || taken < left {
		t.Fatalf("%d ids after leafd stopped, %d pool batches; want the %d batches left in the pool, %d ids", got, taken, left, 200*left)
	}
}

func TestWithPoolOption(t *testing.T) {
	nc := natstest.Connect(t, natsURL(t))
	if _, err := New(nc, WithPool(-time.Second)); !errors.Is(err, ErrBadOption) {
		t.Fatalf("negative pool wait: %v", err)
	}
	for _, bad := range []string{"", "a.b", "e*", "east west"} {
		if _, err := New(nc, WithPool(0), WithPoolRegion(bad)); !errors.Is(err, ErrBadOption) {
			t.Errorf("pool region %q: %v, want ErrBadOption", bad, err)
		}
	}
	if _, err := New(nc, WithPoolRegion("east")); !errors.Is(err, ErrBadOption) {
		t.Errorf("pool region without WithPool: %v, want ErrBadOption", err)
	}
}

// With WithPoolRegion a client reads its region's pool (the region's own
// stream, filled by its nodes with its ids): two regions' nodes on one
// NATS fill a pool each; once both nodes are gone, a client of east drains
// east's pool only (even ids: east is region 0 of 2), one of west west's
// (odd ids), and a client naming no region finds no pool (a deployment of
// regions has no LEAF_POOL).
func TestPoolRegion(t *testing.T) {
	url := natsURL(t)
	const depth, batch = 3, 100
	var nodes []*node.Node
	for i, name := range []string{"east", "west"} {
		cfg := config.Config{Name: name + "-1", Pool: config.PoolConfig{Tags: "pooled", Depth: depth, Batch: batch}}
		cfg.Registry.Kind = config.RegistryKV
		cfg.Region.Count, cfg.Region.Name, cfg.Store.AutoCreate = 2, name, "true"
		cfg.Region.SetID(i)
		nodes = append(nodes, startLeafd(t, url, cfg))
	}
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"east", "west"} {
		subject := pool.SegmentSubjectIn(wire.Scope(name), "pooled")
		eventually(t, subject+" full", func() bool {
			st, err := js.Stream(context.Background(), pool.StreamIn(wire.Scope(name)))
			if err != nil {
				return false
			}
			info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
			return err == nil && info.State.Subjects[subject] == depth
		})
	}
	for _, n := range nodes {
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(c *Client) []int64 {
		var got []int64
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			id, err := c.Next(ctx, "pooled")
			cancel()
			if errors.Is(err, ErrUnavailable) {
				return got
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, id)
			if len(got) > depth*batch {
				t.Fatal("more ids than the region's pool held")
			}
		}
	}
	seen := map[int64]bool{}
	for i, name := range []string{"east", "west"} {
		c := newClient(t, url, WithPool(50*time.Millisecond), WithPoolRegion(name), WithBatch(64, batch), WithMaxWait(time.Second))
		got := drain(c)
		if len(got) != depth*batch || c.poolTakes.Load() != depth {
			t.Errorf("%s: %d ids in %d pool batches, want its pool's %d in %d", name, len(got), c.poolTakes.Load(), depth*batch, depth)
		}
		for _, id := range got {
			if id%2 != int64(i) || seen[id] {
				t.Fatalf("%s: id %d of another region, or twice", name, id)
			}
			seen[id] = true
		}
	}
	c := newClient(t, url, WithPool(50*time.Millisecond), WithMaxWait(time.Second))
	if got := drain(c); len(got) != 0 || c.poolTakes.Load() != 0 {
		t.Errorf("a client of no region: %d ids from %d pool batches, want none", len(got), c.poolTakes.Load())
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
