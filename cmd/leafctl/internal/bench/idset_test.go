package bench

import "testing"

func TestIDSet(t *testing.T) {
	var a idSet
	for _, id := range []int64{0, 1, 1023, 1024, -1, -1024, -1025, 1 << 62, -1 << 63} {
		if !a.add(id) {
			t.Errorf("%d reported as a duplicate on first add", id)
		}
		if a.add(id) {
			t.Errorf("%d not reported as a duplicate on second add", id)
		}
	}
	var b idSet
	for id := int64(1000); id < 3000; id++ {
		b.add(id)
	}
	// a holds 1023 and 1024 of b's range, so merging finds two duplicates.
	if dups := a.merge(&b); dups != 2 {
		t.Errorf("merge found %d duplicates, want 2", dups)
	}
	if a.add(2999) || !a.add(3000) {
		t.Error("merge lost or invented ids")
	}
	var empty idSet
	if dups := empty.merge(&a); dups != 0 {
		t.Errorf("merge into empty: %d", dups)
	}
	if b.add(1500) {
		t.Error("merge changed its argument") // b was copied, not shared
	}
	if !empty.add(5000) || b.add(5000) == false {
		t.Error("merged chunks are shared between sets")
	}
}

func BenchmarkIDSetDense(b *testing.B) {
	var s idSet
	for i := range b.N {
		s.add(int64(i))
	}
}
