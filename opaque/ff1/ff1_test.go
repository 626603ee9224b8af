package ff1_test

import (
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/opaque/ff1"
)

const digits = "0123456789abcdefghijklmnopqrstuvwxyz"

func numerals(s string) []uint16 {
	x := make([]uint16, len(s))
	for i, r := range s {
		x[i] = uint16(strings.IndexRune(digits, r))
	}
	return x
}

func text(x []uint16) string {
	var b strings.Builder
	for _, d := range x {
		b.WriteByte(digits[d])
	}
	return b.String()
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NIST's FF1 examples (SP 800-38G, "FF1samples.pdf"), samples 1 to 9.
func TestNISTSamples(t *testing.T) {
	const (
		k128 = "2B7E151628AED2A6ABF7158809CF4F3C"
		k192 = k128 + "EF4359D8D580AA4F"
		k256 = k192 + "7F036D6F04FC6A94"
	)
	for i, c := range []struct {
		key, tweak string
		radix      int
		pt, ct     string
	}{
		{k128, "", 10, "0123456789", "2433477484"},
		{k128, "39383736353433323130", 10, "0123456789", "6124200773"},
		{k128, "3737373770717273373737", 36, "0123456789abcdefghi", "a9tv40mll9kdu509eum"},
		{k192, "", 10, "0123456789", "2830668132"},
		{k192, "39383736353433323130", 10, "0123456789", "2496655549"},
		{k192, "3737373770717273373737", 36, "0123456789abcdefghi", "xbj3kv35jrawxv32ysr"},
		{k256, "", 10, "0123456789", "6657667009"},
		{k256, "39383736353433323130", 10, "0123456789", "1001623463"},
		{k256, "3737373770717273373737", 36, "0123456789abcdefghi", "xs8a0azh2avyalyzuwd"},
	} {
		ci, err := ff1.New(unhex(t, c.key), c.radix)
		if err != nil {
			t.Fatal(err)
		}
		tw := unhex(t, c.tweak)
		ct, err := ci.Encrypt(numerals(c.pt), tw)
		if err != nil {
			t.Fatal(err)
		}
		if text(ct) != c.ct {
			t.Errorf("sample %d: Encrypt(%s) = %s, want %s", i+1, c.pt, text(ct), c.ct)
		}
		pt, err := ci.Decrypt(numerals(c.ct), tw)
		if err != nil {
			t.Fatal(err)
		}
		if text(pt) != c.pt {
			t.Errorf("sample %d: Decrypt(%s) = %s, want %s", i+1, c.ct, text(pt), c.pt)
		}
	}
}

// Bits computes what Cipher computes on the binary numeral string, for
// every width and tweak lengths around the block size, and inverts itself.
func TestBitsEqualsCipher(t *testing.T) {
	key := unhex(t, "2B7E151628AED2A6ABF7158809CF4F3C")
	c, err := ff1.New(key, 2)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for width := 20; width <= 64; width++ {
		for _, tl := range []int{0, 1, 5, 11, 12, 15, 16, 17, 40} {
			tweak := make([]byte, tl)
			for i := range tweak {
				tweak[i] = byte(rng.UintN(256))
			}
			b, err := ff1.NewBits(c, width, tweak)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				v := rng.Uint64()
				if width < 64 {
					v &= 1<<width - 1
				}
				got, err := b.Encrypt(v)
				if err != nil {
					t.Fatal(err)
				}
				want, err := c.Encrypt(bitString(v, width), tweak)
				if err != nil {
					t.Fatal(err)
				}
				if w := bitValue(want); got != w {
					t.Fatalf("width %d, tweak %d bytes: Bits.Encrypt(%d) = %d, Cipher says %d", width, tl, v, got, w)
				}
				back, err := b.Decrypt(got)
				if err != nil || back != v {
					t.Fatalf("width %d: Decrypt(Encrypt(%d)) = %d, %v", width, v, back, err)
				}
			}
		}
	}
}

// A permutation: on a domain small enough to walk, every value is hit once.
func TestBitsIsPermutation(t *testing.T) {
	c, _ := ff1.New(make([]byte, 16), 2)
	b, err := ff1.NewBits(c, 20, []byte("orders"))
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, 1<<20)
	for v := range uint64(1 << 20) {
		e, err := b.Encrypt(v)
		if err != nil {
			t.Fatal(err)
		}
		if seen[e] {
			t.Fatalf("Encrypt(%d) = %d, already an image", v, e)
		}
		seen[e] = true
	}
}

func TestInvalid(t *testing.T) {
	if _, err := ff1.New(make([]byte, 15), 2); err == nil {
		t.Error("a 15-byte key was taken")
	}
	if _, err := ff1.New(make([]byte, 16), 1); err == nil {
		t.Error("radix 1 was taken")
	}
	c, _ := ff1.New(make([]byte, 16), 10)
	if _, err := c.Encrypt(numerals("12345"), nil); err == nil {
		t.Error("a domain of 10^5 (below FF1's million) was taken")
	}
	if _, err := c.Encrypt([]uint16{1, 2, 3, 4, 5, 6, 10}, nil); err == nil {
		t.Error("numeral 10 in radix 10 was taken")
	}
	if _, err := ff1.NewBits(c, 32, nil); err == nil {
		t.Error("Bits on radix 10 was taken")
	}
	c2, _ := ff1.New(make([]byte, 16), 2)
	for _, w := range []int{19, 65} {
		if _, err := ff1.NewBits(c2, w, nil); err == nil {
			t.Errorf("width %d was taken", w)
		}
	}
	b, _ := ff1.NewBits(c2, 53, nil)
	if _, err := b.Encrypt(1 << 53); err == nil {
		t.Error("2^53 in a 53-bit domain was taken")
	}
}

func bitString(v uint64, width int) []uint16 {
	x := make([]uint16, width)
	for i := width - 1; i >= 0; i-- {
		x[i] = uint16(v & 1)
		v >>= 1
	}
	return x
}

func bitValue(x []uint16) uint64 {
	var v uint64
	for _, d := range x {
		v = v<<1 | uint64(d)
	}
	return v
}

func BenchmarkBits53(b *testing.B) {
	c, _ := ff1.New(make([]byte, 16), 2)
	x, _ := ff1.NewBits(c, 53, []byte("orders"))
	var v uint64
	for b.Loop() {
		v, _ = x.Encrypt(v & (1<<53 - 1))
	}
}
