package snowflake

import (
	"context"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
)

// A registration dropped while the Source's loop turned it to serving (a
// Fill found the claim lapsed during the loop's renewal, and the loop then
// said "serving") left a Source serving with no registration, answering
// 503 "no registration" until restarted (the chaos soak's restart-zk). The
// loop must notice and claim again.
func TestSourceHealsServingWithoutRegistration(t *testing.T) {
	layout := Layout{TimeBits: 51, WorkerBits: 10, SequenceBits: 2}
	c := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	src, err := StartSource(context.Background(), SourceConfig{
		Open:   func(context.Context) (Registry, error) { return NewStatic(layout, 1) },
		Layout: layout, LeaseAhead: 100 * time.Millisecond, Clock: c,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// The outcome of the race, set by hand.
	src.mu.Lock()
	cur := src.cur.Load()
	cur.dead.Store(true)
	src.cur.Store(nil)
	src.stale = append(src.stale, cur.reg)
	src.mu.Unlock()
	src.state.Store(int32(StateServing))
	if n, err := src.Fill(context.Background(), make([]int64, 1)); err == nil {
		t.Fatalf("Fill = %d with no registration, before the loop ran", n)
	}
	// The loop runs on the clock's ticker: each poll is one more round.
	testenv.Eventually(t, "the Source to claim again", 10*time.Second, func() bool {
		c.Advance(src.check)
		n, err := src.Fill(context.Background(), make([]int64, 1))
		return err == nil && n == 1
	})
}
