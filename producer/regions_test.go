package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"

	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// TestRegionsThroughRings: with many regions the ids that leave the rings
// are the region's (its remainder mod N), strictly increasing one request
// after another; the ids a retired ring still holds go back to the store
// as local numbers, so the next engine continues right after the last id
// served.
func TestRegionsThroughRings(t *testing.T) {
	ctx, tag := context.Background(), wire.MustTag("r")
	rg := segment.Regions{N: 3, R: 2}
	store := memstore.New()
	if err := store.Create(ctx, segment.Tag{Name: tag, Step: 100}); err != nil {
		t.Fatal(err)
	}
	newRegionEngine := func() *segment.Engine {
		e, err := segment.New(segment.Config{Store: store, Regions: rg, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	e := newRegionEngine()
	p := newProducer(t, producer.Config{Segments: e, MinRing: 16, MaxRing: 64})
	var last int64
	for i := range 300 {
		dst := make([]int64, 1+i%5)
		if err := p.Segment(ctx, tag, dst); err != nil {
			t.Fatal(err)
		}
		for _, id := range dst {
			if id <= last || id%rg.N != rg.R {
				t.Fatalf("request %d: id %d after %d (region %d of %d)", i, id, last, rg.R, rg.N)
			}
			last = id
		}
	}
	// A ring that holds ids: they are the run just below the engine's
	// unserved top, and go back with it.
	testenv.Eventually(t, "a refilled ring", 5*time.Second, func() bool {
		rs := p.Rings()
		return len(rs) == 1 && rs[0].Len > 0
	})
	rings := p.Retire()
	if len(rings[tag]) == 0 {
		t.Fatal("the retired ring held no ids")
	}
	e.HandBack(ctx, rings)
	if got := next(t, newRegionEngine(), tag); got != last+rg.N {
		t.Fatalf("after the hand-back: id %d, want %d (the one after %d)", got, last+rg.N, last)
	}
}

func next(t *testing.T, e *segment.Engine, tag wire.Tag) int64 {
	t.Helper()
	id, err := e.Next(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
