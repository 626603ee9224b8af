package node

import (
	"context"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
)

// TestNoPeerServes: a worker id the registry gives with no lease on record
// is new only if no live node says it holds it (an operator may have
// deleted the record, or the whole registry, under the live holder). The
// Source waits out the claim TTL otherwise (TestSourceWaitsOutUnknownWorker).
func TestNoPeerServes(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	start := func(name string, worker int64) *Node {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := Start(ctx, config.Config{
			Name:     name,
			NATS:     config.NATSConfig{URL: s.ClientURL()},
			HTTP:     config.HTTPConfig{Addr: "off"},
			DataDir:  t.TempDir(),
			Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: worker},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close(context.Background()) })
		return n
	}
	a := start("holder", 5)
	b := start("newcomer", 6)
	testenv.Eventually(t, "both serving", 10*time.Second, func() bool {
		return a.Snowflake().State() == snowflake.StateServing && b.Snowflake().State() == snowflake.StateServing
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if b.noPeerServes(ctx, 5) {
		t.Error("worker 5, held by a live node: new")
	}
	if !b.noPeerServes(ctx, 7) {
		t.Error("worker 7, held by no one: not new")
	}
	if !b.noPeerServes(ctx, 6) {
		t.Error("worker 6, held by the asking node itself: not new")
	}
}

// The clock offset to the peers is measured again while serving, not only at
// start: a clock stepped after the start shows in the metric's source.
func TestPeerClockWatched(t *testing.T) {
	peerClockEvery = 100 * time.Millisecond
	t.Cleanup(func() { peerClockEvery = 30 * time.Second })
	s := natstest.RunServer(t)
	start := func(name string, worker int64, step string) *Node {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := Start(ctx, config.Config{
			Name:     name,
			NATS:     config.NATSConfig{URL: s.ClientURL()},
			HTTP:     config.HTTPConfig{Addr: "off"},
			DataDir:  t.TempDir(),
			Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: worker},
			Fault:    config.FaultConfig{ClockStep: step},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close(context.Background()) })
		return n
	}
	start("steady", 1, "")
	drifter := start("drifter", 2, "3s@500ms") // its clock jumps 3 s ahead half a second after the start
	testenv.Eventually(t, "the drift measured", 10*time.Second, func() bool {
		return drifter.serve.sf.Offset() < -2*time.Second
	})
}
