package segment_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// regionEngine is an engine of region rg on s, started, without a refresher.
func regionEngine(t *testing.T, s segment.Store, rg segment.Regions, opq func(string, segment.Mode) (segment.Permuter, error)) *segment.Engine {
	t.Helper()
	e, err := segment.New(segment.Config{Store: s, RefreshInterval: -1, Opaque: opq, Regions: rg, Sleep: quickSleep,
		Logger: slog.New(slog.DiscardHandler), ReadyWait: 5e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// sameStore is a memstore with tag "t" at maxID, step 10: every region's
// store holds the same row, as after a copy.
func sameStore(t *testing.T, maxID int64, m segment.Mode) *memstore.Store {
	t.Helper()
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("t"), MaxID: maxID, Step: 10, Mode: m}); err != nil {
		t.Fatal(err)
	}
	return s
}

// draw takes n ids of "t" from e by every path that hands them out (Next,
// Fill, TryFill, Reserve, TryReserve), in turn.
func draw(t *testing.T, e *segment.Engine, n int) []int64 {
	t.Helper()
	ctx, tag := context.Background(), wire.MustTag("t")
	var ids []int64
	for i := 0; len(ids) < n; i++ {
		switch i % 5 {
		case 0:
			ids = append(ids, next(t, e, "t"))
		case 1:
			dst := make([]int64, 7)
			k, err := e.Fill(ctx, tag, dst)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, dst[:k]...)
		case 2:
			dst := make([]int64, 3)
			if k, ok := e.TryFill(tag, dst); ok {
				ids = append(ids, dst[:k]...)
			}
		case 3:
			first, k, err := e.Reserve(ctx, tag, 4)
			if err != nil {
				t.Fatal(err)
			}
			for j := range k {
				ids = append(ids, first+int64(j))
			}
		case 4:
			if first, k, ok := e.TryReserve(tag, 4); ok {
				for j := range k {
					ids = append(ids, first+int64(j))
				}
			}
		}
	}
	return ids
}

// TestRegionsNeverCollide: engines of three regions on stores with the
// same rows hand out ids that no other region hands out, each region's
// strictly increasing and of its remainder mod N, by every path; the
// stores and the floors count local numbers.
func TestRegionsNeverCollide(t *testing.T) {
	const n, each = 3, 200
	seen := map[int64]int64{}
	for r := range int64(n) {
		rg := segment.Regions{N: n, R: r}
		s := sameStore(t, 1, segment.Mode{})
		e := regionEngine(t, s, rg, nil)
		ids := draw(t, e, each)
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("region %d: id %d after %d", r, id, ids[i-1])
			}
			if id%n != r {
				t.Fatalf("region %d: id %d is not %d mod %d", r, id, r, n)
			}
			if was, ok := seen[id]; ok {
				t.Fatalf("id %d handed out by regions %d and %d", id, was, r)
			}
			seen[id] = r
			if l, reg, ok := rg.Local(id); !ok || reg != r || rg.ID(l) != id {
				t.Fatalf("Local(%d) = %d, %d, %v", id, l, reg, ok)
			}
		}
		row, err := s.Get(context.Background(), wire.MustTag("t"))
		if err != nil {
			t.Fatal(err)
		}
		// Local numbers: the row and the floor are past the local
		// numbers served.
		last, _, _ := rg.Local(ids[len(ids)-1])
		if row.MaxID <= last || e.Floor("t") != row.MaxID {
			t.Fatalf("region %d: max_id %d, floor %d after local %d (id %d)", r, row.MaxID, e.Floor("t"), last, ids[len(ids)-1])
		}
	}
}

// TestRegionsOneIsNone: Regions with N 0 or 1 hand out exactly the ids of
// an engine without Regions, Reserve's runs included.
func TestRegionsOneIsNone(t *testing.T) {
	want := draw(t, regionEngine(t, sameStore(t, 1, segment.Mode{}), segment.Regions{}, nil), 300)
	for _, rg := range []segment.Regions{{N: 0}, {N: 1}} {
		got := draw(t, regionEngine(t, sameStore(t, 1, segment.Mode{}), rg, nil), 300)
		if len(got) != len(want) {
			t.Fatalf("%+v: %d ids, want %d", rg, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%+v: id %d is %d, want %d", rg, i, got[i], want[i])
			}
		}
	}
}

// TestRegionsConfigChecked: a region id outside 0..N-1 is refused.
func TestRegionsConfigChecked(t *testing.T) {
	for _, rg := range []segment.Regions{{N: 3, R: 3}, {N: 3, R: -1}, {N: -2}, {N: 0, R: 1}} {
		if _, err := segment.New(segment.Config{Store: memstore.New(), Regions: rg}); !errors.Is(err, segment.ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", rg, err)
		}
	}
}

// exhaust takes ids of "t" until e refuses, failing beyond max ids; it
// checks the refusal is ErrDomainExhausted (a 400) and stays so without a
// range taken for it.
func exhaust(t *testing.T, e *segment.Engine, s *memstore.Store, max int) []int64 {
	t.Helper()
	var ids []int64
	for {
		id, err := e.Next(context.Background(), wire.MustTag("t"))
		if err != nil {
			if !errors.Is(err, segment.ErrDomainExhausted) || wire.CodeOf(err) != wire.CodeBadRequest {
				t.Fatalf("after %d ids: %v, want ErrDomainExhausted (code 400)", len(ids), err)
			}
			break
		}
		ids = append(ids, id)
		if len(ids) > max {
			t.Fatalf("more than %d ids: %v", max, ids)
		}
	}
	allocs := s.Allocations()
	for range 3 {
		if _, err := e.Next(context.Background(), wire.MustTag("t")); !errors.Is(err, segment.ErrDomainExhausted) {
			t.Fatalf("asked again: %v, want ErrDomainExhausted", err)
		}
	}
	if n := s.Allocations(); n != allocs {
		t.Fatalf("%d more ranges taken for an exhausted tag", n-allocs)
	}
	return ids
}

// TestRegionsExhausted: a plain tag whose local numbers near the last one
// whose id fits an int64 serves up to it, never an id past 2^63-1 (which
// would wrap around to a negative id), then answers ErrDomainExhausted;
// a store already past it is refused at once.
func TestRegionsExhausted(t *testing.T) {
	rg := segment.Regions{N: 4, R: 3}
	top := rg.Last(math.MaxInt64)
	if top != (math.MaxInt64-3)/4 || rg.ID(top) < 0 || rg.ID(top+1) > 0 {
		t.Fatalf("Last = %d: its id %d, the next %d", top, rg.ID(top), rg.ID(top+1))
	}
	s := sameStore(t, top-4, segment.Mode{})
	ids := exhaust(t, regionEngine(t, s, rg, nil), s, 5)
	if len(ids) != 5 || ids[4] != rg.ID(top) {
		t.Fatalf("ids %v, want the 5 up to %d", ids, rg.ID(top))
	}

	past := sameStore(t, top+1, segment.Mode{})
	if ids := exhaust(t, regionEngine(t, past, rg, nil), past, 0); len(ids) != 0 {
		t.Fatalf("ids %v past the last", ids)
	}
}

// regionOpaque is a node's Config.Opaque in region rg: tag's permutation
// of the region's share of its domain, under k.
func regionOpaque(k *opaque.Key, rg segment.Regions) func(string, segment.Mode) (segment.Permuter, error) {
	return func(tag string, m segment.Mode) (segment.Permuter, error) {
		if m.KeyID != k.ID() {
			return nil, errors.New("the tag was created with key " + m.KeyID + ", this node has " + k.ID())
		}
		return k.RegionPerm(tag, m.Width, rg.N, rg.R)
	}
}

// TestRegionsOpaque: an opaque tag permutes its region's local numbers
// within the region's share of its domain, then maps them as a plain
// tag's: every id of region R is R mod N and within the domain, regions on
// the same rows never collide, every id decodes back (Regions.Local, then
// the region's Sequence) to its region and local number, and the domain
// ends at the last local number whose id is in it.
func TestRegionsOpaque(t *testing.T) {
	k := testKey(t)
	m := segment.Mode{Kind: segment.KindOpaque, Width: 20, KeyID: k.ID()}
	const n = 3
	seen := map[int64]bool{}
	for r := range int64(n) {
		rg := segment.Regions{N: n, R: r}
		p, err := k.RegionPerm("t", 20, n, r)
		if err != nil {
			t.Fatal(err)
		}
		top := rg.Last(1<<20 - 1)
		s := sameStore(t, top-40, m)
		ids := exhaust(t, regionEngine(t, s, rg, regionOpaque(k, rg)), s, 41)
		if len(ids) != 41 {
			t.Fatalf("region %d: %d ids, want the 41 left", r, len(ids))
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("region %d: id %d handed out twice", r, id)
			}
			seen[id] = true
			v, reg, ok := rg.Local(id)
			if !ok || reg != r || id >= 1<<20 {
				t.Fatalf("region %d: id %d is of region %d, or past 2^20", r, id, reg)
			}
			l, err := p.Sequence(v)
			if err != nil || l < top-40 || l > top {
				t.Fatalf("region %d: id %d decodes to local %d (%v), want [%d, %d]", r, id, l, err, top-40, top)
			}
		}
	}
}

// TestRegionsOpaqueNeverMeetsAnotherMode: two regions serve one tag name,
// region 0 opaque under one key, region 1 in each other way a region's
// store may hold it (plain, another key, another width, the same): no id
// is served by both. Permuting l*N + R over the whole domain (the mapping
// before ids were mapped into the region's remainder after permuting) put
// a region's opaque ids in every remainder class: all but the same key
// and width collide within a few thousand ids of a 20-bit domain.
func TestRegionsOpaqueNeverMeetsAnotherMode(t *testing.T) {
	const ids = 4000
	k1 := testKey(t)
	k2, err := opaque.ParseKey("f0e0d0c0b0a090807060504030201000")
	if err != nil {
		t.Fatal(err)
	}
	draw := func(k *opaque.Key, m segment.Mode, r int64) []int64 {
		t.Helper()
		rg := segment.Regions{N: 2, R: r}
		s := memstore.New()
		if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("t"), MaxID: 1, Step: 1000, Mode: m}); err != nil {
			t.Fatal(err)
		}
		var opq func(string, segment.Mode) (segment.Permuter, error)
		if k != nil {
			opq = regionOpaque(k, rg)
		}
		e := regionEngine(t, s, rg, opq)
		out := make([]int64, 0, ids)
		for len(out) < ids {
			dst := make([]int64, 500)
			n, err := e.Fill(context.Background(), wire.MustTag("t"), dst)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, dst[:n]...)
		}
		for _, id := range out {
			if id%2 != r || id >= 1<<m.Width && m.Kind == segment.KindOpaque {
				t.Fatalf("region %d served id %d: not %d mod 2, or past its %d-bit domain", r, id, r, m.Width)
			}
		}
		return out
	}
	opq := func(k *opaque.Key, w int) segment.Mode {
		return segment.Mode{Kind: segment.KindOpaque, Width: w, KeyID: k.ID()}
	}
	region0 := map[int64]bool{}
	for _, id := range draw(k1, opq(k1, 20), 0) {
		region0[id] = true
	}
	for _, tc := range []struct {
		name string
		key  *opaque.Key
		mode segment.Mode
	}{
		{"plain", nil, segment.Mode{}},
		{"another key", k2, opq(k2, 20)},
		{"another width", k1, opq(k1, 21)},
		{"the same", k1, opq(k1, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			both := 0
			for _, id := range draw(tc.key, tc.mode, 1) {
				if region0[id] {
					both++
				}
			}
			if both != 0 {
				t.Fatalf("%d of %d ids served by both regions", both, ids)
			}
		})
	}
}

// TestRegionsOpaqueShare: an engine refuses an opaque tag whose
// permutation is not of its region's share (the whole domain's, with many
// regions, would serve ids past 2^W-1 or of another remainder), and a
// width that leaves a region too small a share to walk cheaply.
func TestRegionsOpaqueShare(t *testing.T) {
	k := testKey(t)
	ctx, tag := context.Background(), wire.MustTag("t")
	rg := segment.Regions{N: 2, R: 1}
	s := sameStore(t, 1, segment.Mode{Kind: segment.KindOpaque, Width: 20, KeyID: k.ID()})
	if _, err := regionEngine(t, s, rg, keyOpaque(k)).Next(ctx, tag); !errors.Is(err, segment.ErrMode) {
		t.Fatalf("Next with the whole domain's permutation: %v, want ErrMode", err)
	}
	rg = segment.Regions{N: 32, R: 0} // 2^20/32 = 2^15 ids a region
	if _, err := regionEngine(t, s, rg, regionOpaque(k, rg)).Next(ctx, tag); !errors.Is(err, segment.ErrMode) ||
		wire.CodeOf(err) != wire.CodeBadRequest || !strings.Contains(err.Error(), "only 32767 ids") {
		t.Fatalf("Next with a share of 2^15: %v, want ErrMode (400) naming the share", err)
	}
	if segment.MinOpaqueShare != opaque.MinShare {
		t.Fatalf("MinOpaqueShare %d, opaque.MinShare %d", segment.MinOpaqueShare, opaque.MinShare)
	}
}

// TestRegionsHandBack: the ids a ring holds are mapped back to local
// numbers, so that a ring just below the unserved top is handed back with
// it, as with one region.
func TestRegionsHandBack(t *testing.T) {
	ctx, tag := context.Background(), wire.MustTag("t")
	rg := segment.Regions{N: 5, R: 2}
	for _, tc := range []struct {
		name string
		ring []int64 // local numbers a ring above the engine holds
		want int64
	}{
		{name: "buffers", want: 7},
		{name: "buffers and ring", ring: []int64{6, 4, 5}, want: 4},
		{name: "ring not the run below", ring: []int64{4, 6}, want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sameStore(t, 1, segment.Mode{})
			e := regionEngine(t, s, rg, nil)
			for l := int64(1); l <= 6; l++ {
				if id, err := e.Next(ctx, tag); err != nil || id != rg.ID(l) {
					t.Fatalf("Next = %d, %v; want %d", id, err, rg.ID(l))
				}
			}
			waitFor(t, "the next range", func() bool {
				st, _ := e.State("t")
				return st.Segments[0].Max > 0 && st.Segments[1].Max > 0
			})
			var ring []int64
			for _, l := range tc.ring {
				ring = append(ring, rg.ID(l))
			}
			e.HandBack(ctx, map[wire.Tag][]int64{tag: ring})
			row, err := s.Get(ctx, tag)
			if err != nil {
				t.Fatal(err)
			}
			if row.MaxID != tc.want || e.Floor("t") != tc.want {
				t.Fatalf("max_id %d, floor %d after the hand-back; want %d", row.MaxID, e.Floor("t"), tc.want)
			}
			if id := next(t, regionEngine(t, s, rg, nil), "t"); id != rg.ID(tc.want) {
				t.Fatalf("next id after the hand-back: %d, want %d", id, rg.ID(tc.want))
			}
		})
	}
}

// TestRegionsHeadroom: a tag's capacity runway (TagState.Headroom) counts
// the local numbers left above the ranges reserved, to the last one whose
// id is within the tag's domain: an opaque tag's 2^W-1 over the regions.
func TestRegionsHeadroom(t *testing.T) {
	k := testKey(t)
	rg := segment.Regions{N: 3, R: 1}
	top := rg.Last(1<<20 - 1)
	s := sameStore(t, 0, segment.Mode{Kind: segment.KindOpaque, Width: 20, KeyID: k.ID()})
	e := regionEngine(t, s, rg, regionOpaque(k, rg))
	next(t, e, "t")
	st := state(t, e, "t")
	if hi := max(st.Segments[0].Max, st.Segments[1].Max); st.Headroom != top-hi+1 || st.Headroom > top-10 {
		t.Fatalf("Headroom %d with ranges up to %d, want %d (the domain's last local number %d)", st.Headroom, hi-1, top-hi+1, top)
	}
}
