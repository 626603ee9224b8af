package mono_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/memlease"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// regionLeader is the leading Leader of tag "m" in region rg, on a store
// of its own whose row is at maxID with step 100.
func regionLeader(t *testing.T, rg segment.Regions, maxID int64) *mono.Leader {
	t.Helper()
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("m"), MaxID: maxID, Step: 100}); err != nil {
		t.Fatal(err)
	}
	l := start(t, mono.Config{Node: "a", Ranges: &segment.Reserver{Store: s, Logger: quiet}, Lease: memlease.New(time.Second, nil),
		Step: 10, Regions: rg})
	testenv.Eventually(t, "leading", 5*time.Second, l.Leading)
	return l
}

// TestRegionsLeader: the leaders of a tag in three regions, on stores with
// the same row, hand out ids strictly increasing, each region's of its
// remainder mod N, none handed out by two regions; with one region the
// runs are as long as asked.
func TestRegionsLeader(t *testing.T) {
	const n = 3
	seen := map[int64]int64{}
	for r := range int64(n) {
		rg := segment.Regions{N: n, R: r}
		l := regionLeader(t, rg, 1)
		var last int64
		for range 100 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			id, k, err := l.Next(ctx, 5)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if k != 1 || id <= last || id%n != r {
				t.Fatalf("region %d: Next = %d, %d after %d", r, id, k, last)
			}
			if was, ok := seen[id]; ok {
				t.Fatalf("id %d handed out by regions %d and %d", id, was, r)
			}
			seen[id], last = r, id
		}
	}
	for _, rg := range []segment.Regions{{}, {N: 1}} {
		l := regionLeader(t, rg, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, k, err := l.Next(ctx, 5)
		cancel()
		if err != nil || id != 1 || k != 5 {
			t.Fatalf("%+v: Next = %d, %d, %v; want 1, 5", rg, id, k, err)
		}
	}
}

// TestRegionsLeaderExhausted: a leader serves up to the last local number
// whose id fits an int64, never past it, then answers ErrDomainExhausted.
func TestRegionsLeaderExhausted(t *testing.T) {
	rg := segment.Regions{N: 4, R: 1}
	top := rg.Last(math.MaxInt64)
	l := regionLeader(t, rg, top-2)
	var ids []int64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, _, err := l.Next(ctx, 1)
		cancel()
		if err != nil {
			if !errors.Is(err, segment.ErrDomainExhausted) {
				t.Fatalf("after %v: %v, want ErrDomainExhausted", ids, err)
			}
			break
		}
		ids = append(ids, id)
		if len(ids) > 3 || id < 0 {
			t.Fatalf("ids %v past the last, %d", ids, rg.ID(top))
		}
	}
	if len(ids) != 3 || ids[2] != rg.ID(top) {
		t.Fatalf("ids %v, want the 3 up to %d", ids, rg.ID(top))
	}
}
