package snowflake

import (
	"context"
	"testing"
	"time"
)

// A registration dropped while the Source's loop turned it to serving (a
// Fill found the claim lapsed during the loop's renewal, and the loop then
// said "serving") left a Source serving with no registration, answering
// 503 "no registration" until restarted (the chaos soak's restart-zk). The
// loop must notice and claim again.
func TestSourceHealsServingWithoutRegistration(t *testing.T) {
	layout := Layout{TimeBits: 51, WorkerBits: 10, SequenceBits: 2}
	src, err := StartSource(context.Background(), SourceConfig{
		Open:   func(context.Context) (Registry, error) { return NewStatic(layout, 1) },
		Layout: layout, LeaseAhead: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// The outcome of the race, set by hand.
	src.mu.Lock()
	c := src.cur.Load()
	c.dead.Store(true)
	src.cur.Store(nil)
	src.stale = append(src.stale, c.reg)
	src.mu.Unlock()
	src.state.Store(int32(StateServing))

	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := src.Fill(context.Background(), make([]int64, 1))
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Source did not claim again: state %v, Fill: %d, %v", src.State(), n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
