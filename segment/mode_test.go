package segment_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/wire"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

func modeEngine(t *testing.T, s segment.Store, opq func(string, segment.Mode) (segment.Permuter, error)) *segment.Engine {
	t.Helper()
	return modeEngineOn(t, s, opq, nil)
}

// modeEngineOn is modeEngine on clock c (nil: the real clock).
func modeEngineOn(t *testing.T, s segment.Store, opq func(string, segment.Mode) (segment.Permuter, error), c clock.Clock) *segment.Engine {
	t.Helper()
	e, err := segment.New(segment.Config{Store: s, RefreshInterval: -1, Opaque: opq, Sleep: quickSleep, Logger: slog.New(slog.DiscardHandler), Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestMonoTagRefused: a monotonic tag is never served on the segment
// path; the error names the subject to ask; no range is taken for it when
// the tag is looked up on request.
func TestMonoTagRefused(t *testing.T) {
	s := memstore.New()
	e := modeEngine(t, s, nil)
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("ticks"), Step: 10, Mode: segment.Mode{Kind: segment.KindMono}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := e.Next(context.Background(), wire.MustTag("ticks"))
		if !errors.Is(err, segment.ErrMode) || !strings.Contains(err.Error(), "leaf.mono.ticks") {
			t.Fatalf("Next of a mono tag = %v, want ErrMode naming leaf.mono.ticks", err)
		}
	}
	if _, _, err := e.Reserve(context.Background(), wire.MustTag("ticks"), 5); !errors.Is(err, segment.ErrMode) {
		t.Fatalf("Reserve of a mono tag = %v, want ErrMode", err)
	}
	if n := s.Allocations(); n != 0 {
		t.Fatalf("%d ranges taken for a mono tag on the segment path", n)
	}
}

// TestMonoTagRefusedAfterPreload: a tag first met by Start's preload (no
// lookup) is refused by its first load, and not loaded again.
func TestMonoTagRefusedAfterPreload(t *testing.T) {
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("ticks"), Step: 10, Mode: segment.Mode{Kind: segment.KindMono}}); err != nil {
		t.Fatal(err)
	}
	e := modeEngine(t, s, nil) // preloads every tag (no Steps)
	for range 5 {
		if _, err := e.Next(context.Background(), wire.MustTag("ticks")); !errors.Is(err, segment.ErrMode) {
			t.Fatalf("Next = %v, want ErrMode", err)
		}
	}
	if n := s.Allocations(); n > 1 {
		t.Fatalf("%d ranges taken for a mono tag; want at most the preload's one", n)
	}
}

func testKey(t *testing.T) *opaque.Key {
	t.Helper()
	k, err := opaque.ParseKey("000102030405060708090a0b0c0d0e0f")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyOpaque(k *opaque.Key) func(string, segment.Mode) (segment.Permuter, error) {
	return func(tag string, m segment.Mode) (segment.Permuter, error) {
		if m.KeyID != k.ID() {
			return nil, errors.New("the tag was created with key " + m.KeyID + ", this node has " + k.ID())
		}
		return k.Perm(tag, m.Width)
	}
}

// TestOpaqueTagPermuted: an opaque tag's ids, from Next, Fill and
// TryFill, are the permutation of its sequence numbers: unique, within
// the width, without order; Reserve (consecutive ids) refuses the tag.
func TestOpaqueTagPermuted(t *testing.T) {
	k := testKey(t)
	s := memstore.New()
	m := segment.Mode{Kind: segment.KindOpaque, Width: 40, KeyID: k.ID()}
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("orders"), Step: 100, Mode: m}); err != nil {
		t.Fatal(err)
	}
	e := modeEngine(t, s, keyOpaque(k))
	p, _ := k.Perm("orders", 40)
	seen := map[int64]bool{}
	rises := 0
	var prev int64
	add := func(id int64) {
		if id < 1 || id >= 1<<40 || seen[id] {
			t.Fatalf("id %d out of the 40-bit domain or repeated", id)
		}
		seen[id] = true
		if seq, err := p.Sequence(id); err != nil || seq < 1 || seq > 10_000 {
			t.Fatalf("Sequence(%d) = %d, %v", id, seq, err)
		}
		if id > prev {
			rises++
		}
		prev = id
	}
	ctx := context.Background()
	for len(seen) < 3000 {
		id, err := e.Next(ctx, wire.MustTag("orders"))
		if err != nil {
			t.Fatal(err)
		}
		add(id)
		buf := make([]int64, 7)
		n, err := e.Fill(ctx, wire.MustTag("orders"), buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range buf[:n] {
			add(id)
		}
		if n, ok := e.TryFill(wire.MustTag("orders"), buf); ok {
			for _, id := range buf[:n] {
				add(id)
			}
		}
	}
	if rises > len(seen)*6/10 || rises < len(seen)*4/10 {
		t.Fatalf("%d of %d ids rose: the order shows", rises, len(seen))
	}
	if _, _, err := e.Reserve(ctx, wire.MustTag("orders"), 5); !errors.Is(err, segment.ErrMode) {
		t.Fatalf("Reserve of an opaque tag = %v, want ErrMode", err)
	}
	if _, _, ok := e.TryReserve(wire.MustTag("orders"), 5); ok {
		t.Fatal("TryReserve of an opaque tag handed out consecutive ids")
	}
}

// TestOpaqueTagWithoutKeyRefused: a node without the key, or with
// another key, serves none of an opaque tag's ids, and takes no more
// ranges for it after the first.
func TestOpaqueTagWithoutKeyRefused(t *testing.T) {
	k := testKey(t)
	other, _ := opaque.ParseKey("ffeeddccbbaa99887766554433221100")
	for name, opq := range map[string]func(string, segment.Mode) (segment.Permuter, error){
		"no key":    nil,
		"other key": keyOpaque(other),
	} {
		t.Run(name, func(t *testing.T) {
			s := memstore.New()
			m := segment.Mode{Kind: segment.KindOpaque, Width: 53, KeyID: k.ID()}
			if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("orders"), Step: 10, Mode: m}); err != nil {
				t.Fatal(err)
			}
			e := modeEngine(t, s, opq)
			for range 3 {
				if id, err := e.Next(context.Background(), wire.MustTag("orders")); !errors.Is(err, segment.ErrNoKey) {
					t.Fatalf("Next = %d, %v; want ErrNoKey", id, err)
				}
			}
			if n := s.Allocations(); n > 1 {
				t.Fatalf("%d ranges taken for a tag this node cannot serve", n)
			}
		})
	}
}

// TestOpaqueWidthExhausted: an opaque tag serves every id left in its
// domain, the last range cut at the domain's end, then answers
// ErrDomainExhausted (a 400: not retried) and takes no more ranges.
func TestOpaqueWidthExhausted(t *testing.T) {
	k := testKey(t)
	s := memstore.New()
	m := segment.Mode{Kind: segment.KindOpaque, Width: 20, KeyID: k.ID()}
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("small"), MaxID: 1<<20 - 15, Step: 10, Mode: m}); err != nil {
		t.Fatal(err)
	}
	e := modeEngine(t, s, keyOpaque(k))
	p, _ := k.Perm("small", 20)
	seen := map[int64]bool{}
	for {
		id, err := e.Next(context.Background(), wire.MustTag("small"))
		if err != nil {
			if !errors.Is(err, segment.ErrDomainExhausted) || wire.CodeOf(err) != wire.CodeBadRequest {
				t.Fatalf("after %d ids: %v, want ErrDomainExhausted (code 400)", len(seen), err)
			}
			break
		}
		seq, err := p.Sequence(id)
		if err != nil || seq < 1<<20-15 || seen[id] {
			t.Fatalf("id %d (sequence %d, %v) repeated or not among the last 15 of the domain", id, seq, err)
		}
		seen[id] = true
		if len(seen) > 15 {
			t.Fatal("more ids than the domain has left")
		}
	}
	if len(seen) != 15 {
		t.Fatalf("served %d ids, want the 15 left in the domain", len(seen))
	}
	allocs := s.Allocations()
	for range 3 {
		if _, err := e.Next(context.Background(), wire.MustTag("small")); !errors.Is(err, segment.ErrDomainExhausted) {
			t.Fatalf("asked again: %v, want ErrDomainExhausted", err)
		}
	}
	if n := s.Allocations(); n != allocs {
		t.Fatalf("%d more ranges taken for an exhausted tag", n-allocs)
	}
}

// TestModeChangedInStoreRefused: a store that reports another mode for a
// tag this node served (a row edited by hand) gets no more of its ids
// served; ids of the ranges already loaded stay permuted.
func TestModeChangedInStoreRefused(t *testing.T) {
	k := testKey(t)
	s := memstore.New()
	m := segment.Mode{Kind: segment.KindOpaque, Width: 53, KeyID: k.ID()}
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("orders"), Step: 10, Mode: m}); err != nil {
		t.Fatal(err)
	}
	e := modeEngine(t, s, keyOpaque(k))
	p, _ := k.Perm("orders", 53)
	if _, err := e.Next(context.Background(), wire.MustTag("orders")); err != nil {
		t.Fatal(err)
	}
	s.SetModeByHand(wire.MustTag("orders"), segment.Mode{Kind: segment.KindSegment})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		id, err := e.Next(context.Background(), wire.MustTag("orders"))
		if err != nil {
			if !errors.Is(err, segment.ErrMode) {
				t.Fatalf("Next = %v, want ErrMode", err)
			}
			return
		}
		if seq, err := p.Sequence(id); err != nil || seq > 40 {
			t.Fatalf("id %d is not a permuted id of the tag's first ranges (seq %d, %v)", id, seq, err)
		}
	}
	t.Fatal("the engine kept serving after the store changed the tag's mode")
}

// TestRetire: Retire reports the top of the last range no caller took and
// stops every take; a range another node reserved in between cuts the
// run at the last range.
func TestRetire(t *testing.T) {
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("t"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	e := modeEngine(t, s, nil)
	for want := int64(1); want <= 3; want++ {
		if id, err := e.Next(context.Background(), wire.MustTag("t")); err != nil || id != want {
			t.Fatalf("Next = %d, %v; want %d", id, err, want)
		}
	}
	// The next range loads in the background once the mark is passed
	// (10% of 10: at once), on a goroutine of its own (no timer): wait
	// until it is there.
	waitFor(t, "the next range", func() bool {
		st, _ := e.State("t")
		return st.Segments[0].Max > 0 && st.Segments[1].Max > 0
	})
	row, err := s.Get(context.Background(), wire.MustTag("t"))
	if err != nil {
		t.Fatal(err)
	}
	got := e.Retire()
	// Both ranges are this engine's, one after the other (the second's
	// step may have grown): everything from 4 up to max_id is unserved.
	want := []segment.Unserved{{Tag: wire.MustTag("t"), From: row.MaxID, To: 4}}
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("Retire = %+v, want %+v", got, want)
	}
	if id, err := e.Next(context.Background(), wire.MustTag("t")); err == nil {
		t.Fatalf("Next after Retire = %d, want an error", id)
	}
}

// TestRetireAfterAnotherNode: when another node reserved between this
// engine's two ranges, only the last range can go back.
func TestRetireAfterAnotherNode(t *testing.T) {
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("t"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	e := modeEngine(t, s, nil) // preloads [1,11)
	// The loads run on a goroutine of their own (no timer).
	waitSegments := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d segments loaded", n), func() bool {
			st, _ := e.State("t")
			got := 0
			for _, sg := range st.Segments {
				if sg.Max > 0 {
					got++
				}
			}
			return got >= n
		})
	}
	waitSegments(1)
	if _, err := s.Advance(context.Background(), wire.MustTag("t"), 0, 0); err != nil { // another node: [11,21)
		t.Fatal(err)
	}
	if id, err := e.Next(context.Background(), wire.MustTag("t")); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	waitSegments(2)
	row, _ := s.Get(context.Background(), wire.MustTag("t"))
	got := e.Retire()
	if len(got) != 1 || got[0].From != row.MaxID || got[0].To != 21 {
		t.Fatalf("Retire = %+v, want From %d To 21 (the last range only)", got, row.MaxID)
	}
}

// TestRetireWaitsForLoad: a stop while the next range is being reserved
// (the store answers late) waits for it and hands back both ranges; it
// handed back nothing (CI saw a graceful restart go on 663 ids up).
func TestRetireWaitsForLoad(t *testing.T) {
	s := newTestStore()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("t"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	e := modeEngineOn(t, s, nil, clk) // preloads [1,11)
	s.setBlocked(true)
	if id, err := e.Next(context.Background(), wire.MustTag("t")); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	waitFor(t, "the next range loading", func() bool { st, _ := e.State("t"); return st.Loading })
	got := make(chan []segment.Unserved, 1)
	go func() { got <- e.Retire() }()
	testenv.Armed(t, clk, 1) // Retire is waiting for the load, its deadline far off
	s.setBlocked(false)
	u := <-got
	row, err := s.Get(context.Background(), wire.MustTag("t"))
	if err != nil {
		t.Fatal(err)
	}
	if len(u) != 1 || u[0].From != row.MaxID || u[0].To != 2 {
		t.Fatalf("Retire during a load = %+v, want From %d (max_id) To 2", u, row.MaxID)
	}
}
