package segment_test

import (
	"context"
	"testing"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// TestHandBack: a retiring engine gives the store back the top of its
// last range that no caller took, and the ring's ids with it when they
// are the run just below; its own floor goes down with max_id. When
// another node reserved after it, the store keeps max_id (the
// compare-and-swap) and no id can be served twice.
func TestHandBack(t *testing.T) {
	tag := wire.MustTag("t")
	for _, tc := range []struct {
		name  string
		ring  []int64 // what a ring above the engine still holds
		moved bool    // another node reserves before the hand-back
		want  int64   // max_id after it; 0: unchanged
	}{
		{name: "buffers", want: 7},
		{name: "buffers and ring", ring: []int64{6, 4, 5}, want: 4},
		{name: "ring not the run below", ring: []int64{4, 6}, want: 7},
		{name: "another node reserved", ring: []int64{4, 5, 6}, moved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := memstore.New()
			if err := s.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
				t.Fatal(err)
			}
			e := modeEngine(t, s, nil)
			for want := int64(1); want <= 6; want++ {
				if id, err := e.Next(ctx, tag); err != nil || id != want {
					t.Fatalf("Next = %d, %v; want %d", id, err, want)
				}
			}
			waitFor(t, "the next range", func() bool {
				st, _ := e.State("t")
				return st.Segments[0].Max > 0 && st.Segments[1].Max > 0
			})
			if tc.moved {
				if _, err := s.Advance(ctx, tag, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			before, err := s.Get(ctx, tag)
			if err != nil {
				t.Fatal(err)
			}
			e.HandBack(ctx, map[wire.Tag][]int64{tag: tc.ring})
			after, err := s.Get(ctx, tag)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == 0 {
				want = before.MaxID
			}
			if after.MaxID != want {
				t.Fatalf("max_id %d after the hand-back (was %d), want %d", after.MaxID, before.MaxID, want)
			}
			if tc.want != 0 && e.Floor("t") != tc.want {
				t.Fatalf("floor %d after the hand-back, want %d", e.Floor("t"), tc.want)
			}
			if id, err := modeEngine(t, s, nil).Next(ctx, tag); err != nil || id != want {
				t.Fatalf("next id after the hand-back: %d, %v; want %d", id, err, want)
			}
		})
	}
}
