package opaque_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/opaque"
)

const hexKey = "2b7e151628aed2a6abf7158809cf4f3c"

func key(t testing.TB) *opaque.Key {
	t.Helper()
	k, err := opaque.ParseKey(hexKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseKey(t *testing.T) {
	for _, bad := range []string{"", "zz", "00", strings.Repeat("ab", 15), strings.Repeat("ab", 33)} {
		if _, err := opaque.ParseKey(bad); !errors.Is(err, opaque.ErrKey) {
			t.Errorf("ParseKey(%q) = %v, want ErrKey", bad, err)
		}
	}
	for _, n := range []int{16, 24, 32} {
		if _, err := opaque.ParseKey(" " + strings.Repeat("0f", n) + "\n"); err != nil {
			t.Errorf("ParseKey of %d bytes: %v", n, err)
		}
	}
	a, b := key(t), key(t)
	if a.ID() != b.ID() || len(a.ID()) != 16 {
		t.Fatalf("ID = %q, %q; want one 16-digit id", a.ID(), b.ID())
	}
	other, _ := opaque.ParseKey(strings.Repeat("11", 16))
	if other.ID() == a.ID() {
		t.Fatal("two keys share an id")
	}
}

// TestKeyNeverPrinted: no way of printing a Key shows the key.
func TestKeyNeverPrinted(t *testing.T) {
	k := key(t)
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), k.String(), k.GoString()} {
		if strings.Contains(s, hexKey) || strings.Contains(strings.ToLower(s), "2b7e15") {
			t.Fatalf("printed key: %s", s)
		}
	}
}

func TestReadKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(hexKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := opaque.ReadKeyFile(path)
	if err != nil || k.ID() != key(t).ID() {
		t.Fatalf("ReadKeyFile = %v, %v", k, err)
	}
	if _, err := opaque.ReadKeyFile(path + ".missing"); !errors.Is(err, opaque.ErrKey) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestPermutationIsBijection walks a whole 20-bit domain: every sequence
// number maps to a distinct id in [1, 2^20), never 0, and Sequence inverts
// it.
func TestPermutationIsBijection(t *testing.T) {
	p, err := key(t).Perm("orders", 20)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, 1<<20)
	inOrder := 0
	var prev int64
	for seq := int64(1); seq <= p.Max(); seq++ {
		id := p.Permute(seq)
		if id < 1 || id > p.Max() || seen[id] {
			t.Fatalf("Permute(%d) = %d: out of range or repeated", seq, id)
		}
		seen[id] = true
		if seq%97 == 0 { // the inverse on a sample: it is the same rounds backwards
			if back, err := p.Sequence(id); err != nil || back != seq {
				t.Fatalf("Sequence(%d) = %d, %v; want %d", id, back, err, seq)
			}
		}
		if id > prev {
			inOrder++
		}
		prev = id
	}
	// A permutation with no visible order rises about half the time.
	if frac := float64(inOrder) / float64(p.Max()); frac < 0.45 || frac > 0.55 {
		t.Fatalf("ids rise %.3f of the time, want about 0.5", frac)
	}
}

// TestTagsDiffer: one key, two tags, two permutations.
func TestTagsDiffer(t *testing.T) {
	a, _ := key(t).Perm("a", 53)
	b, _ := key(t).Perm("b", 53)
	same := 0
	for seq := int64(1); seq <= 100; seq++ {
		if a.Permute(seq) == b.Permute(seq) {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("%d of 100 ids equal across tags", same)
	}
	if _, err := key(t).Perm("a", 64); err == nil {
		t.Fatal("width 64 accepted")
	}
	if _, err := a.Sequence(0); err == nil {
		t.Fatal("Sequence(0) accepted")
	}
}

func BenchmarkPermute53(b *testing.B) {
	p, _ := key(b).Perm("orders", 53)
	var sink int64
	for i := range b.N {
		sink += p.Permute(int64(i) + 1)
	}
	_ = sink
}

// TestRegionPermShares: each local number l of region r maps to the id
// Permute(l)*n + r, which is r mod n and below 2^width, and Sequence
// inverts Permute. One share is walked whole (region 1 of 2 in a 20-bit
// domain: every odd id from 3 up, each once); the others, for 2, 3 and 7
// regions, on their first and last local numbers. Regions permute
// differently (their tweaks name them).
func TestRegionPermShares(t *testing.T) {
	p, err := key(t).RegionPerm("orders", 20, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, 1<<20)
	for l := int64(1); l <= p.Max(); l++ {
		id := p.Permute(l)*2 + 1
		if id < 3 || id >= 1<<20 || seen[id] {
			t.Fatalf("local %d gives id %d: out of the share or repeated", l, id)
		}
		seen[id] = true
	}
	for id := 3; id < 1<<20; id += 2 {
		if !seen[id] {
			t.Fatalf("id %d is not served", id)
		}
	}

	const window = 1000
	for _, c := range []struct {
		width int
		n     int64
	}{{20, 2}, {20, 3}, {24, 7}, {53, 3}} {
		first := map[int64]int64{} // region 0's permuted value of each local number sampled
		for r := range c.n {
			p, err := key(t).RegionPerm("orders", c.width, c.n, r)
			if err != nil {
				t.Fatal(err)
			}
			if want := (1<<c.width - 1 - r) / c.n; p.Max() != want || p.Width() != c.width {
				t.Fatalf("%d bits, region %d of %d: Max %d, Width %d; want %d, %d", c.width, r, c.n, p.Max(), p.Width(), want, c.width)
			}
			same, ids := 0, map[int64]bool{}
			for i := range int64(2 * window) {
				l := 1 + i
				if i >= window {
					l = p.Max() - (i - window)
				}
				v := p.Permute(l)
				id := v*c.n + r
				if v < 1 || v > p.Max() || id%c.n != r || id >= 1<<c.width || ids[id] {
					t.Fatalf("%d bits, region %d of %d: local %d gives id %d: out of the share or repeated", c.width, r, c.n, l, id)
				}
				ids[id] = true
				if back, err := p.Sequence(v); err != nil || back != l {
					t.Fatalf("%d bits, region %d of %d: Sequence(%d) = %d, %v; want %d", c.width, r, c.n, v, back, err, l)
				}
				if r == 0 {
					first[l] = v
				} else if w, ok := first[l]; ok && w == v {
					same++
				}
			}
			if same > 2 {
				t.Fatalf("%d bits, region %d of %d: %d of %d local numbers permute as in region 0", c.width, r, c.n, same, 2*window)
			}
			if _, err := p.Sequence(p.Max() + 1); err == nil {
				t.Fatalf("%d bits, region %d of %d: Sequence past the share accepted", c.width, r, c.n)
			}
		}
	}
}

// TestRegionPermOneRegion: with one region RegionPerm is Perm, id for id.
func TestRegionPermOneRegion(t *testing.T) {
	p, _ := key(t).Perm("orders", 53)
	for _, n := range []int64{0, 1} {
		q, err := key(t).RegionPerm("orders", 53, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 1000; seq++ {
			if p.Permute(seq) != q.Permute(seq) {
				t.Fatalf("n %d: RegionPerm(%d) = %d, Perm %d", n, seq, q.Permute(seq), p.Permute(seq))
			}
		}
	}
}

// TestRegionPermRefuses: a region outside the deployment, and a width whose
// share is below MinShare (the error names the width that would do).
func TestRegionPermRefuses(t *testing.T) {
	for _, c := range []struct {
		width int
		n, r  int64
		want  string
	}{
		{53, 4, 4, "region 4"},
		{53, 4, -1, "region -1"},
		{20, 32, 0, "at least 22 bits"},
		{20, 16, 15, "at least 21 bits"},
		{30, 1 << 16, 5, "at least 33 bits"},
	} {
		if _, err := key(t).RegionPerm("orders", c.width, c.n, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RegionPerm(width %d, %d of %d) = %v, want an error naming %q", c.width, c.r, c.n, err, c.want)
		}
	}
	if _, err := key(t).RegionPerm("orders", 21, 16, 15); err != nil {
		t.Errorf("a 21-bit domain in 16 regions (2^17 - 1 ids each): %v", err)
	}
}

// BenchmarkPermute53Regions is BenchmarkPermute53 for region 1 of n: the
// share's FF1 domain is the least power of two above it, so an id costs
// 2n/2^ceil(log2 n) FF1 calls on average (about 1 for 2 regions, 1.5 for
// 3, 1.75 for 7).
func BenchmarkPermute53Regions(b *testing.B) {
	for _, n := range []int64{2, 3, 7} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			p, err := key(b).RegionPerm("orders", 53, n, 1)
			if err != nil {
				b.Fatal(err)
			}
			var sink int64
			for i := range b.N {
				sink += p.Permute(int64(i) + 1)
			}
			_ = sink
		})
	}
}

// TestForMode: a tag's recorded key id names the key and the region count
// it was created under (ModeID); a node serves it only under both.
func TestForMode(t *testing.T) {
	k := key(t)
	other, err := opaque.ParseKey(strings.Repeat("ab", 16))
	if err != nil {
		t.Fatal(err)
	}
	if k.ModeID(0) != k.ID() || k.ModeID(1) != k.ID() || k.ModeID(3) != k.ID()+"-n3" {
		t.Fatalf("ModeID: %s %s %s", k.ModeID(0), k.ModeID(1), k.ModeID(3))
	}
	for _, c := range []struct {
		name   string
		keyID  string
		n      int64
		refuse string
	}{
		{"one region", k.ID(), 1, ""},
		{"regions", k.ModeID(3), 3, ""},
		{"created without regions", k.ID(), 3, "created without regions"},
		{"created with regions", k.ModeID(3), 1, "created with regions"},
		{"another count", k.ModeID(2), 3, "created with key"},
		{"another key", other.ModeID(3), 3, "created with key"},
	} {
		_, err := k.ForMode("orders", 53, c.keyID, c.n, 0)
		if c.refuse == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, opaque.ErrWrongKey) || !strings.Contains(err.Error(), c.refuse) {
			t.Errorf("%s: %v, want ErrWrongKey saying %q", c.name, err, c.refuse)
		}
	}
}
