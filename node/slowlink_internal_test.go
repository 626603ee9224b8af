package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// TestSnowflakeServesOverSlowLink: a serving node whose link to NATS
// slows to 0.4 s each way, so a round trip takes 0.8 s and a time-lease
// renewal (a read of the lease key from the stream leader, then its
// compare-and-swap) 1.6 s: more than half of the 3 s lease ahead, which was
// all a renewal got. Within 30 s of the slowdown the node serves snowflake
// again (if it stopped), and then answers 99 of 100 requests with ids.
// (A node that starts 0.8 s from NATS does not get that far: opening the
// monotonic tags' bucket is bounded by 3 s.)
func TestSnowflakeServesOverSlowLink(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := proxyTo(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := Start(ctx, Config{Name: "slow", NATS: NATSConfig{URL: "nats://" + p.Listen}, DataDir: t.TempDir(),
		HTTP: HTTPConfig{Addr: "127.0.0.1:0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	serving := func() bool { return n.Snowflake().State() == snowflake.StateServing && n.SnowflakeJoined() }
	for !serving() {
		if ctx.Err() != nil {
			t.Fatalf("snowflake %v a minute after the start", n.Snowflake().State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	bothWays(t, p, "latency", "latency", 400)
	slowed := time.Now()
	// Past a few renewals on the slow link.
	time.Sleep(10 * time.Second)
	for !serving() {
		if time.Since(slowed) > 30*time.Second {
			_, why := n.ReadySubject(wire.SubjectSnowflake)
			t.Fatalf("snowflake %v 30 s after the link slowed to 0.8 s round trips (readiness: %v)", n.Snowflake().State(), why)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("serving %v after the slowdown; lease up to %v ahead", time.Since(slowed).Round(time.Millisecond),
		time.Until(n.Snowflake().Leased()).Round(time.Millisecond))
	// 100 requests, ten at a time (each takes a round trip to the node).
	nc := natstest.Connect(t, s.ClientURL())
	var mu sync.Mutex
	var wg sync.WaitGroup
	ids, fails := 0, map[string]int{}
	for range 10 {
		wg.Go(func() {
			for range 10 {
				reply, err := nc.RequestMsg(wire.NewRequest(wire.SnowflakeSubject, 1, false), 10*time.Second)
				if err == nil {
					err = wire.ReplyError(reply)
				}
				mu.Lock()
				switch {
				case err == nil:
					ids++
				case errors.Is(err, nats.ErrNoResponders):
					fails["no responders"]++
				default:
					fails[err.Error()]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ids < 99 {
		t.Errorf("%d of 100 requests got ids 0.4 s from NATS; failures: %v", ids, fails)
	} else if len(fails) > 0 {
		t.Logf("failures: %v", fails)
	}
}
