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
