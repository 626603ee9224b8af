package ff1

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
)

// ErrInput: a key, radix, numeral string or tweak that FF1 does not take.
var ErrInput = errors.New("ff1: invalid input")

const (
	rounds = 10
	// minDomain is the least radix^len FF1 allows (SP 800-38G rev 1).
	minDomain = 1_000_000
	maxLen    = 1 << 16 // a bound of ours: ids are short
)

// Cipher is FF1 with one AES key and radix. Safe for concurrent use.
type Cipher struct {
	block cipher.Block
	radix int
}

// New returns FF1 over AES with key (16, 24 or 32 bytes) and radix
// (2..65536).
func New(key []byte, radix int) (*Cipher, error) {
	if radix < 2 || radix > 1<<16 {
		return nil, fmt.Errorf("%w: radix %d is not 2-65536", ErrInput, radix)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	return &Cipher{block: block, radix: radix}, nil
}

// Encrypt returns the FF1 encryption of the numeral string x (each
// element < radix) under tweak.
func (c *Cipher) Encrypt(x []uint16, tweak []byte) ([]uint16, error) {
	return c.crypt(x, tweak, true)
}

// Decrypt inverts Encrypt.
func (c *Cipher) Decrypt(x []uint16, tweak []byte) ([]uint16, error) {
	return c.crypt(x, tweak, false)
}

func (c *Cipher) check(x []uint16) error {
	n := len(x)
	if n < 2 || n > maxLen {
		return fmt.Errorf("%w: length %d is not 2-%d", ErrInput, n, maxLen)
	}
	dom := new(big.Int).Exp(big.NewInt(int64(c.radix)), big.NewInt(int64(n)), nil)
	if dom.Cmp(big.NewInt(minDomain)) < 0 {
		return fmt.Errorf("%w: radix^length %v is below %d", ErrInput, dom, minDomain)
	}
	for _, d := range x {
		if int(d) >= c.radix {
			return fmt.Errorf("%w: numeral %d is not below radix %d", ErrInput, d, c.radix)
		}
	}
	return nil
}

// crypt is SP 800-38G algorithms 7 (FF1.Encrypt) and 8 (FF1.Decrypt).
func (c *Cipher) crypt(x []uint16, tweak []byte, encrypt bool) ([]uint16, error) {
	if err := c.check(x); err != nil {
		return nil, err
	}
	n, t := len(x), len(tweak)
	u := n / 2
	v := n - u
	radix := big.NewInt(int64(c.radix))
	a, b := c.num(x[:u]), c.num(x[u:])
	// b: bytes of a half's number; d: bytes of the round function's output.
	bl := (bitLen(radix, v) + 7) / 8
	d := 4*((bl+3)/4) + 4
	p := header(c.radix, u, n, t)
	pad := mod(-t-bl-1, 16)
	q := make([]byte, t+pad+1+bl)
	copy(q, tweak)
	modU := new(big.Int).Exp(radix, big.NewInt(int64(u)), nil)
	modV := new(big.Int).Exp(radix, big.NewInt(int64(v)), nil)
	y := new(big.Int)
	for k := range rounds {
		i := k
		if !encrypt {
			i = rounds - 1 - k
		}
		// The round function reads B when encrypting, A when decrypting.
		in := b
		if !encrypt {
			in = a
		}
		q[t+pad] = byte(i)
		fill(q[t+pad+1:], in)
		s := c.expand(c.prf(p[:], q), d)
		y.SetBytes(s)
		m := modU
		if i%2 == 1 {
			m = modV
		}
		cc := new(big.Int)
		if encrypt {
			cc.Add(a, y)
		} else {
			cc.Sub(b, y)
		}
		cc.Mod(cc, m)
		if encrypt {
			a, b = b, cc
		} else {
			b, a = a, cc
		}
	}
	out := make([]uint16, n)
	c.str(out[:u], a)
	c.str(out[u:], b)
	return out, nil
}

// header is P of step 5: [1]¹ [2]¹ [1]¹ [radix]³ [10]¹ [u mod 256]¹ [n]⁴ [t]⁴.
func header(radix, u, n, t int) [16]byte {
	var p [16]byte
	p[0], p[1], p[2] = 1, 2, 1
	p[3], p[4], p[5] = byte(radix>>16), byte(radix>>8), byte(radix)
	p[6], p[7] = 10, byte(u)
	binary.BigEndian.PutUint32(p[8:], uint32(n))
	binary.BigEndian.PutUint32(p[12:], uint32(t))
	return p
}

// prf is the CBC-MAC of p || q with a zero IV (PRF of step 6.ii).
func (c *Cipher) prf(p, q []byte) [16]byte {
	var r [16]byte
	c.block.Encrypt(r[:], p)
	for len(q) > 0 {
		for j := range 16 {
			r[j] ^= q[j]
		}
		c.block.Encrypt(r[:], r[:])
		q = q[16:]
	}
	return r
}

// expand is S of step 6.iii: the first d bytes of R || CIPH(R ⊕ [1]¹⁶) || …
func (c *Cipher) expand(r [16]byte, d int) []byte {
	s := append(make([]byte, 0, (d+15)/16*16), r[:]...)
	for j := 1; len(s) < d; j++ {
		var blk [16]byte
		copy(blk[:], r[:])
		binary.BigEndian.PutUint64(blk[8:], binary.BigEndian.Uint64(blk[8:])^uint64(j))
		c.block.Encrypt(blk[:], blk[:])
		s = append(s, blk[:]...)
	}
	return s[:d]
}

// num is NUM_radix(x): the numeral string read as a number, first numeral
// most significant.
func (c *Cipher) num(x []uint16) *big.Int {
	r, z := big.NewInt(int64(c.radix)), new(big.Int)
	for _, d := range x {
		z.Mul(z, r)
		z.Add(z, big.NewInt(int64(d)))
	}
	return z
}

// str is STR^len(dst)_radix(z).
func (c *Cipher) str(dst []uint16, z *big.Int) {
	r, z, m := big.NewInt(int64(c.radix)), new(big.Int).Set(z), new(big.Int)
	for i := len(dst) - 1; i >= 0; i-- {
		z.DivMod(z, r, m)
		dst[i] = uint16(m.Int64())
	}
}

// fill writes z big-endian into all of dst.
func fill(dst []byte, z *big.Int) {
	clear(dst)
	z.FillBytes(dst)
}

// bitLen is ⌈v·log2(radix)⌉, exactly: the bit length of radix^v − 1.
func bitLen(radix *big.Int, v int) int {
	z := new(big.Int).Exp(radix, big.NewInt(int64(v)), nil)
	return z.Sub(z, big.NewInt(1)).BitLen()
}

func mod(a, m int) int { return ((a % m) + m) % m }
