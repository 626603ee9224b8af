package ff1

import (
	"encoding/binary"
	"fmt"
)

// Bits is FF1 in radix 2 over Width-bit numbers (20 to 64 bits; FF1 wants
// a domain of at least a million) with one tweak: a permutation of
// [0, 2^Width). It computes what Cipher computes for the Width-bit binary
// numeral string of a value, on uint64, with the constant head of the
// CBC-MAC (the header block and the tweak's full blocks) done once. Safe
// for concurrent use.
type Bits struct {
	c     *Cipher
	width int
	u, v  int
	bl    int      // bytes of a half's number in the round's input
	head  [16]byte // the CBC-MAC state before the round's last block
	tail  [16]byte // the last block: tweak bytes and padding, then i and B
}

// NewBits returns the permutation of width-bit values under c (which must
// have radix 2) and tweak.
func NewBits(c *Cipher, width int, tweak []byte) (*Bits, error) {
	if c.radix != 2 {
		return nil, fmt.Errorf("%w: Bits needs radix 2, not %d", ErrInput, c.radix)
	}
	if width < 20 || width > 64 {
		return nil, fmt.Errorf("%w: width %d is not 20-64 bits", ErrInput, width)
	}
	u := width / 2
	v := width - u
	bl := (v + 7) / 8 // at most 4: the round's input fits in the last block
	t := len(tweak)
	pad := mod(-t-bl-1, 16)
	q := make([]byte, t+pad+1+bl)
	copy(q, tweak)
	p := header(2, u, width, t)
	x := &Bits{c: c, width: width, u: u, v: v, bl: bl}
	// head: CBC-MAC of P and every block of Q but the last.
	c.block.Encrypt(x.head[:], p[:])
	for rest := q; len(rest) > 16; rest = rest[16:] {
		for j := range 16 {
			x.head[j] ^= rest[j]
		}
		c.block.Encrypt(x.head[:], x.head[:])
	}
	copy(x.tail[:], q[len(q)-16:])
	return x, nil
}

// Width is the number of bits of the domain.
func (x *Bits) Width() int { return x.width }

// round is the round function's value y mod 2^64 (d is 8 bytes for any
// half of at most 32 bits: R's first 8 bytes).
func (x *Bits) round(i int, in uint64) uint64 {
	blk := x.tail
	blk[15-x.bl] = byte(i)
	for j := 15; j > 15-x.bl; j-- { // NUM(B), big-endian in the last bl bytes
		blk[j] = byte(in)
		in >>= 8
	}
	for j := range 16 {
		blk[j] ^= x.head[j]
	}
	x.c.block.Encrypt(blk[:], blk[:])
	return binary.BigEndian.Uint64(blk[:8])
}

// Encrypt permutes v, which must be below 2^Width.
func (x *Bits) Encrypt(val uint64) (uint64, error) {
	if x.width < 64 && val>>x.width != 0 {
		return 0, fmt.Errorf("%w: %d does not fit in %d bits", ErrInput, val, x.width)
	}
	a, b := val>>x.v, val&mask(x.v)
	for i := range rounds {
		m := x.u
		if i%2 == 1 {
			m = x.v
		}
		a, b = b, (a+x.round(i, b))&mask(m)
	}
	return a<<x.v | b, nil
}

// Decrypt inverts Encrypt.
func (x *Bits) Decrypt(val uint64) (uint64, error) {
	if x.width < 64 && val>>x.width != 0 {
		return 0, fmt.Errorf("%w: %d does not fit in %d bits", ErrInput, val, x.width)
	}
	a, b := val>>x.v, val&mask(x.v)
	for i := rounds - 1; i >= 0; i-- {
		m := x.u
		if i%2 == 1 {
			m = x.v
		}
		a, b = (b-x.round(i, a))&mask(m), a
	}
	return a<<x.v | b, nil
}

func mask(bits int) uint64 { return 1<<bits - 1 }
