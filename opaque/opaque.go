package opaque

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"

	"github.com/leafmq/leafmq/opaque/ff1"
)

// ErrKey: a key that cannot be used (not hex, not 16, 24 or 32 bytes, a
// file that cannot be read).
var ErrKey = errors.New("opaque: bad key")

// ErrWrongKey: a tag was created with another key, or another region
// count (Key.ModeID), than this node's.
var ErrWrongKey = errors.New("opaque: not the tag's key")

// Key is the secret that opaque tags are permuted with. Its String and
// GoString print only its id.
type Key struct {
	raw []byte
	id  string
}

// ParseKey reads a key written in hex (32, 48 or 64 hex digits: AES-128,
// -192 or -256), ignoring surrounding white space.
func ParseKey(s string) (*Key, error) {
	raw, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: not hex (want 32, 48 or 64 hex digits)", ErrKey)
	}
	switch len(raw) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("%w: %d bytes (want 16, 24 or 32)", ErrKey, len(raw))
	}
	sum := sha256.Sum256(append([]byte("leafmq opaque key id v1\x00"), raw...))
	return &Key{raw: raw, id: hex.EncodeToString(sum[:8])}, nil
}

// ReadKeyFile reads a key from a file that holds it in hex. The file
// should be readable by leafd's user alone.
func ReadKeyFile(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return k, nil
}

// ID identifies the key without revealing it: the first 8 bytes of a
// SHA-256 of the key, in hex. Tags record it at creation.
func (k *Key) ID() string { return k.id }

// ModeID is the key id an opaque tag created by a node of a deployment of
// n regions records (segment.Mode.KeyID): the key's id, and with n > 1
// "<id>-n<n>". The region count picks the mapping as much as the key
// does: a tag created without regions has ids anywhere in its domain, in
// every region's remainder class, so a node with regions serving it under
// its region's mapping could repeat them, and the reverse. ForMode
// refuses a tag whose recorded id is not this one, as it refuses another
// key.
func (k *Key) ModeID(n int64) string {
	if n <= 1 {
		return k.id
	}
	return fmt.Sprintf("%s-n%d", k.id, n)
}

// ForMode returns the permutation of region r of n for tag, recorded with
// key id keyID (segment.Mode.KeyID) and width, or an error wrapping
// ErrWrongKey when this key, in a deployment of n regions, is not the one
// the tag was created with (ModeID).
func (k *Key) ForMode(tag string, width int, keyID string, n, r int64) (*Perm, error) {
	switch want := k.ModeID(n); {
	case keyID == want:
		return k.RegionPerm(tag, width, n, r)
	case n > 1 && keyID == k.id:
		return nil, fmt.Errorf("%w: opaque tag %q was created without regions: its ids lie in every region's remainder class, so no region serves it (serve a tag of a new name; docs/regions.md)", ErrWrongKey, tag)
	case n <= 1 && strings.HasPrefix(keyID, k.id+"-n"):
		return nil, fmt.Errorf("%w: opaque tag %q was created with regions (key id %s): a node without regions does not serve it", ErrWrongKey, tag, keyID)
	default:
		return nil, fmt.Errorf("%w: the tag was created with key %s, this node's is %s", ErrWrongKey, keyID, want)
	}
}

// String prints the key's id, never the key.
func (k *Key) String() string { return "opaque.Key(" + k.id + ")" }

// GoString prints the key's id, never the key.
func (k *Key) GoString() string { return k.String() }

// Perm is the permutation of one tag's sequence numbers [1, Max()] onto
// the same range: with one region (Key.Perm) the tag's whole domain
// [1, 2^Width), ids and sequence numbers alike; with many regions
// (Key.RegionPerm) one region's share of it, its local numbers, which the
// caller maps onto ids of the region's own remainder. Safe for concurrent
// use.
type Perm struct {
	bits  *ff1.Bits // FF1 over the least power of two above max (2^20 at least)
	width int       // the tag's width W
	max   int64     // the last sequence number
}

// MinShare is the fewest local numbers a region's share of an opaque tag's
// domain may hold (Key.RegionPerm): FF1 permutes no domain below 2^20, so
// a share of L numbers is walked through 2^20/L values an id on average;
// at 2^16 that is 16 FF1 calls at most (at 2^19 and above, under 2).
const MinShare = 1 << 16

// Perm returns tag's permutation over width bits (20-63).
func (k *Key) Perm(tag string, width int) (*Perm, error) {
	return k.RegionPerm(tag, width, 1, 0)
}

// RegionPerm returns the permutation of region r's share of tag's domain
// in a deployment of n regions (docs/regions.md): its local numbers
// [1, L], L = (2^width - 1 - r)/n, the last whose id l*n + r is below
// 2^width. The caller serves local number l as Permute(l)*n + r, so every
// id of region r is r mod n and below 2^width, whatever mode, key or width
// another region serves the tag name with. With n <= 1 it is Perm, exactly.
// The share starts at 1, not 0, as local numbers do (a tag's rows count
// from 1): a permuted 0 would be the id r, which for region 0 is no id.
//
// The permutation is FF1 over the least power-of-two domain holding [0, L]
// (2^20 at least), cycle-walked into [1, L]: fewer than 2 FF1 calls an id
// on average once L is 2^19 or more, and L must be at least MinShare. Its
// tweak is the tag's name, then, with n > 1, n and r: each region permutes
// its share differently, so two regions' ids of one local number (or of
// one FF1 value) do not differ by exactly their remainders, which would
// tell an observer that both regions reached it. It costs nothing per id:
// the tweak is folded into the CBC-MAC's head once.
func (k *Key) RegionPerm(tag string, width int, n, r int64) (*Perm, error) {
	if width < 20 || width > 63 {
		return nil, fmt.Errorf("opaque: width %d is not 20-63 bits", width)
	}
	last := int64(1)<<width - 1
	tweak := []byte(tag)
	if n > 1 {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("opaque: region %d is not 0-%d", r, n-1)
		}
		last = (last - r) / n
		if last < MinShare {
			return nil, fmt.Errorf("opaque: a %d-bit domain leaves region %d of %d only %d ids, fewer than %d: "+
				"use a width of at least %d bits", width, r, n, last, MinShare, minWidth(n))
		}
		// A NUL, then n and r at fixed length: no tag name (which has no
		// NUL) nor other region's tweak is the same.
		tweak = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append(tweak, 0), uint64(n)), uint64(r))
	}
	c, err := ff1.New(k.raw, 2)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	b, err := ff1.NewBits(c, max(20, bits.Len64(uint64(last))), tweak)
	if err != nil {
		return nil, err
	}
	return &Perm{bits: b, width: width, max: last}, nil
}

// minWidth is the least width whose domain gives each of n regions a share
// of at least MinShare.
func minWidth(n int64) int {
	for w := 20; w < 63; w++ {
		if (int64(1)<<w-n)/n >= MinShare {
			return w
		}
	}
	return 63
}

// Width is the number of bits of the tag's domain.
func (p *Perm) Width() int { return p.width }

// Max is the largest sequence number and permuted value: 2^Width - 1 with
// one region, the region's last local number with many.
func (p *Perm) Max() int64 { return p.max }

// Permute returns the permuted value of sequence number seq, which must be
// in [1, Max()]; it panics otherwise (the engine never serves one
// outside). FF1 permutes [0, 2^w) for the least w >= 20 with Max() < 2^w;
// a value outside [1, Max()] is encrypted again (cycle walking), which
// keeps a bijection of [1, Max()]. With one region w is Width, and only 0
// is walked past.
func (p *Perm) Permute(seq int64) int64 {
	if seq < 1 || seq > p.max {
		panic(fmt.Sprintf("opaque: sequence %d outside [1, %d] (%d bits)", seq, p.max, p.width))
	}
	v := uint64(seq)
	for {
		var err error
		if v, err = p.bits.Encrypt(v); err != nil {
			panic(err) // v < 2^w always
		}
		if v != 0 && v <= uint64(p.max) {
			return int64(v)
		}
	}
}

// Sequence inverts Permute: the sequence number of a permuted value, for
// an operator with the key (leafctl tag decode).
func (p *Perm) Sequence(id int64) (int64, error) {
	if id < 1 || id > p.max {
		if p.max == 1<<p.width-1 {
			return 0, fmt.Errorf("opaque: id %d is not in [1, 2^%d)", id, p.width)
		}
		return 0, fmt.Errorf("opaque: local number %d is not in [1, %d] (%d bits)", id, p.max, p.width)
	}
	v := uint64(id)
	for {
		var err error
		if v, err = p.bits.Decrypt(v); err != nil {
			return 0, err
		}
		if v != 0 && v <= uint64(p.max) {
			return int64(v), nil
		}
	}
}
