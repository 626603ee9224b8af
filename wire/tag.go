package wire

import "fmt"

// MaxTagLen is the longest tag: Leaf's biz_tag is a varchar(128).
const MaxTagLen = 128

// ErrInvalid: a tag name, step or max_id was rejected before reaching a
// store. segment.ErrInvalid is this same error, so errors.Is matches either.
var ErrInvalid = NewCodedError(CodeBadRequest, "invalid argument")

// Tag is a checked tag name: 1..MaxTagLen characters of [A-Za-z0-9_-], so
// a single NATS subject token that fits Leaf's biz_tag column.
//
// A name is checked once, where it enters the program (a request subject,
// an HTTP path, a command-line argument, a client call, a configuration
// file, a row read from a store), by ParseTag; everything inside takes a
// Tag and checks nothing again. The field is unexported, so no unchecked
// conversion is possible; only the zero Tag, which names no tag, can be made
// without ParseTag, and is refused wherever a tag is needed (it finds no
// row, and a store refuses to create one for it).
type Tag struct{ s string }

// ParseTag checks s and returns it as a Tag. A bad name is an error
// wrapping ErrInvalid (a 400 on the wire).
func ParseTag(s string) (Tag, error) {
	if !validTag(s) {
		return Tag{}, fmt.Errorf("%w: tag %q must be 1-%d characters of [A-Za-z0-9_-]", ErrInvalid, s, MaxTagLen)
	}
	return Tag{s}, nil
}

// MustTag is ParseTag for names known to be good (constants, tests); it
// panics on a bad one.
func MustTag(s string) Tag {
	t, err := ParseTag(s)
	if err != nil {
		panic(err)
	}
	return t
}

// String is the tag's name ("" for the zero Tag).
func (t Tag) String() string { return t.s }

// IsZero reports whether t is the zero Tag, which names no tag.
func (t Tag) IsZero() bool { return t.s == "" }

// MarshalText is the name, so that a Tag is a string in JSON and in logs.
func (t Tag) MarshalText() ([]byte, error) { return []byte(t.s), nil }

// UnmarshalText is ParseTag: a Tag decoded from JSON or a flag is checked.
func (t *Tag) UnmarshalText(b []byte) error {
	p, err := ParseTag(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

func validTag(s string) bool {
	if len(s) == 0 || len(s) > MaxTagLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
