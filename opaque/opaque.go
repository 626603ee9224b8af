package opaque

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/leafmq/leafmq/opaque/ff1"
)

// ErrKey: a key that cannot be used (not hex, not 16, 24 or 32 bytes, a
// file that cannot be read).
var ErrKey = errors.New("opaque: bad key")

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

// String prints the key's id, never the key.
func (k *Key) String() string { return "opaque.Key(" + k.id + ")" }

// GoString prints the key's id, never the key.
func (k *Key) GoString() string { return k.String() }

// Perm is the permutation of one tag's sequence numbers [1, 2^Width) onto
// ids in the same range. Safe for concurrent use.
type Perm struct {
	bits  *ff1.Bits
	width int
}

// Perm returns tag's permutation over width bits (20-63).
func (k *Key) Perm(tag string, width int) (*Perm, error) {
	if width < 20 || width > 63 {
		return nil, fmt.Errorf("opaque: width %d is not 20-63 bits", width)
	}
	c, err := ff1.New(k.raw, 2)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	b, err := ff1.NewBits(c, width, []byte(tag))
	if err != nil {
		return nil, err
	}
	return &Perm{bits: b, width: width}, nil
}

// Width is the number of bits of the domain.
func (p *Perm) Width() int { return p.width }

// Max is the largest sequence number and id: 2^Width - 1.
func (p *Perm) Max() int64 { return 1<<p.width - 1 }

// Permute returns the id of sequence number seq, which must be in
// [1, Max()]; it panics otherwise (the engine never serves one outside).
// FF1 permutes [0, 2^Width); when it maps seq to 0 the value is encrypted
// again (cycle walking), which keeps a bijection of [1, 2^Width).
func (p *Perm) Permute(seq int64) int64 {
	if seq < 1 || seq > p.Max() {
		panic(fmt.Sprintf("opaque: sequence %d outside [1, 2^%d)", seq, p.width))
	}
	v := uint64(seq)
	for {
		var err error
		if v, err = p.bits.Encrypt(v); err != nil {
			panic(err) // v < 2^width always
		}
		if v != 0 {
			return int64(v)
		}
	}
}

// Sequence inverts Permute: the sequence number of id, for an operator
// with the key (leafctl tag decode).
func (p *Perm) Sequence(id int64) (int64, error) {
	if id < 1 || id > p.Max() {
		return 0, fmt.Errorf("opaque: id %d is not in [1, 2^%d)", id, p.width)
	}
	v := uint64(id)
	for {
		var err error
		if v, err = p.bits.Decrypt(v); err != nil {
			return 0, err
		}
		if v != 0 {
			return int64(v), nil
		}
	}
}
