package segment

import (
	"fmt"

	"github.com/leafmq/leafmq/wire"
)

// Kind is how a tag's ids are served. It is fixed when the tag is created
// and never changes: a tag whose plain and permuted ids mixed could repeat
// an id, and a monotonic tag served by two nodes at once would lose its
// order.
type Kind string

// The kinds of tag.
const (
	// KindSegment: Leaf's segment mode, on leaf.segment.<tag>: increasing
	// per node, a trend across nodes. The zero Mode.
	KindSegment Kind = "segment"
	// KindMono: strictly increasing across nodes (linearizable), one node
	// at a time serving it on leaf.mono.<tag> (package mono).
	KindMono Kind = "mono"
	// KindOpaque: a keyed permutation (FF1) of the tag's sequence, on
	// leaf.segment.<tag>: unique, with no visible order or rate.
	KindOpaque Kind = "opaque"
)

// Limits of an opaque tag's width.
const (
	MinOpaqueWidth     = 20 // FF1 wants a domain of at least a million values
	MaxOpaqueWidth     = 63 // ids are positive int64s
	DefaultOpaqueWidth = 53 // JavaScript numbers hold 53-bit integers exactly
	// MinOpaqueShare is the fewest local numbers a region's share of an
	// opaque tag's domain may hold with many regions (opaque.MinShare:
	// below it each id costs over 16 FF1 calls).
	MinOpaqueShare = 1 << 16
)

// Mode is a tag's kind and, for an opaque tag, the width of its id domain
// and the id of the key its ids are permuted with. Stores keep it apart
// from the row, so that it survives Delete and Restart. The zero Mode is
// KindSegment.
type Mode struct {
	Kind  Kind   `json:"kind,omitempty"`
	Width int    `json:"width,omitempty"`  // opaque: bits of the id domain
	KeyID string `json:"key_id,omitempty"` // opaque: see package opaque
}

// IsSegment reports whether m is the plain segment mode.
func (m Mode) IsSegment() bool { return m.Kind == "" || m.Kind == KindSegment }

// String is "segment", "mono" or "opaque/<width>/<key id>".
func (m Mode) String() string {
	switch {
	case m.IsSegment():
		return string(KindSegment)
	case m.Kind == KindOpaque:
		return fmt.Sprintf("%s/%d/%s", m.Kind, m.Width, m.KeyID)
	}
	return string(m.Kind)
}

// Equal reports whether m and o are the same mode (the zero Mode equals
// KindSegment).
func (m Mode) Equal(o Mode) bool {
	if m.IsSegment() || o.IsSegment() {
		return m.IsSegment() && o.IsSegment()
	}
	return m == o
}

// ErrMode: a tag was asked for in a way its mode does not allow (a
// monotonic tag on leaf.segment.<tag>, a second mode for a tag), or a mode
// is malformed. Nothing was changed.
var ErrMode = wire.NewCodedError(wire.CodeBadRequest, "tag mode")

// ErrDomainExhausted: an opaque tag has handed out every id of its domain
// (2^width - 1 of them); no node will serve another. The code is 400, not a
// retryable 503: asking again, here or elsewhere, cannot succeed. Widening
// the domain would be another permutation, which could repeat ids: the
// way on is a new tag.
var ErrDomainExhausted = wire.NewCodedError(wire.CodeBadRequest, "opaque tag domain exhausted")

// ErrNoKey: this node has not the key an opaque tag was created with (no
// key, or another one). Another node may have it, so the error is a 503:
// clients ask again, and the queue group may send them to a node that can
// serve the tag. The node serves none of the tag's ids.
var ErrNoKey = wire.NewCodedError(wire.CodeUnavailable, "opaque key not on this node")

// NormalizeMode checks m and fills its defaults: the zero Kind is
// KindSegment, an opaque width of 0 is DefaultOpaqueWidth. Only an opaque
// mode has a width and a key id, and it must have a key id.
func NormalizeMode(m Mode) (Mode, error) {
	switch m.Kind {
	case "", KindSegment, KindMono:
		if m.Kind == "" {
			m.Kind = KindSegment
		}
		if m.Width != 0 || m.KeyID != "" {
			return m, fmt.Errorf("%w: a %s tag has no width or key", ErrInvalid, m.Kind)
		}
	case KindOpaque:
		if m.Width == 0 {
			m.Width = DefaultOpaqueWidth
		}
		if m.Width < MinOpaqueWidth || m.Width > MaxOpaqueWidth {
			return m, fmt.Errorf("%w: opaque width %d must be %d-%d bits", ErrInvalid, m.Width, MinOpaqueWidth, MaxOpaqueWidth)
		}
		if m.KeyID == "" || len(m.KeyID) > 64 {
			return m, fmt.Errorf("%w: an opaque tag needs the id of its key (1-64 characters)", ErrInvalid)
		}
	default:
		return m, fmt.Errorf("%w: mode %q is not one of segment, mono, opaque", ErrInvalid, m.Kind)
	}
	return m, nil
}

// ModeConflict is the error of a tag asked to take mode want while the
// store records had: a mode never changes.
func ModeConflict(tag wire.Tag, had, want Mode) error {
	return fmt.Errorf("%w: tag %q was created as %s and stays so (asked for %s)", ErrMode, tag, had, want)
}
