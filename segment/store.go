package segment

import (
	"context"
	"fmt"
	"time"

	"github.com/leafmq/leafmq/wire"
)

// Sentinel errors shared by every Store and by the Engine. Stores wrap them
// with context (fmt.Errorf("%w: tag %q", ErrUnknownTag, tag)); callers test
// with errors.Is.
var (
	// ErrUnknownTag: the biz_tag has no row in the store.
	ErrUnknownTag = wire.NewCodedError(wire.CodeNotFound, "unknown tag")
	// ErrTagExists: Create was asked for a tag that already has a row.
	ErrTagExists = wire.NewCodedError(wire.CodeBadRequest, "tag already exists")
	// ErrTagDeleted: the tag has no row, but the store remembers that it
	// had one (a deleted row, a KV delete or purge marker, a history
	// record). Create, and so auto-create, refuse such a tag: starting it at
	// 1 again would repeat ids already handed out. An operator restarts it
	// with an explicit floor (Store.Restart, leafctl tag restart).
	ErrTagDeleted = wire.NewCodedError(wire.CodeNotFound, "tag was deleted; an operator must restart it with an explicit floor (leafctl tag restart TAG --floor N)")
	// ErrBelowFloor: a range or a floor is below ids already handed out for
	// the tag: max_id was lowered, a row or key was deleted and made again,
	// or the bucket was replaced. No id is served from such a range. An id
	// request refused for it is a 503: the requester did nothing wrong, and
	// the tag serves again once an operator restarts it at its floor (or
	// another node may still hold a range of it). An operator's restart,
	// create or max_id below the floor is a 400: the responder wraps it
	// with ErrInvalid.
	ErrBelowFloor = wire.NewCodedError(wire.CodeUnavailable, "below the ids already issued")
	// ErrStoreChanged: the store is not the one this node served from (a KV
	// bucket deleted and made again); auto-create is refused until an
	// operator acts.
	ErrStoreChanged = wire.NewCodedError(wire.CodeNotFound, "store was replaced")
	// ErrInvalid: a tag name, step or max_id was rejected before reaching
	// the store. It is wire.ErrInvalid, which wire.ParseTag wraps.
	ErrInvalid = wire.ErrInvalid
	// ErrTagLimit: the engine holds its maximum number of tags
	// (Config.MaxTags) and will not take another.
	ErrTagLimit = wire.NewCodedError(wire.CodeUnavailable, "tag limit reached")
	// ErrUnavailable: the store could not be reached or did not answer in time.
	// Nothing was changed, or the change was not confirmed; the caller may retry.
	ErrUnavailable = wire.NewCodedError(wire.CodeUnavailable, "store unavailable")
	// ErrNotReady: the engine has no id to hand out right now (both buffers
	// empty and the next segment did not arrive within the bounded wait).
	ErrNotReady = wire.NewCodedError(wire.CodeUnavailable, "not ready")
	// ErrClosed: the store or engine was closed.
	ErrClosed = wire.NewCodedError(wire.CodeUnavailable, "closed")
)

// PeerFloorError is a Config.CreateCheck refusal: the tag is not in the
// store, but live node Node has received ids of it up to Floor — the
// store lost it. It wraps ErrTagDeleted. When the store has the tag by the
// time the check answers (another node created it meanwhile) at or above
// Floor, the engine loads it instead.
type PeerFloorError struct {
	Tag   wire.Tag
	Node  string
	Floor int64
}

func (e *PeerFloorError) Error() string {
	return fmt.Sprintf("%v: tag %q is not in the store, but node %s has received ids of it up to %d: the store lost it; start it over with leafctl tag restart %s --floor %d",
		ErrTagDeleted, e.Tag, e.Node, e.Floor, e.Tag, e.Floor)
}

func (e *PeerFloorError) Unwrap() error { return ErrTagDeleted }

// Limits of a tag row, as in Leaf's leaf_alloc table.
const (
	MaxStep    = 1<<31 - 1 // step int
	MaxDescLen = 256       // description varchar(256)
)

// MaxTagLen is the longest tag name, biz_tag varchar(128) (wire.MaxTagLen).
const MaxTagLen = wire.MaxTagLen

// Tag is one row of Leaf's leaf_alloc table.
type Tag struct {
	Name        wire.Tag  // biz_tag
	MaxID       int64     // max_id: the highest id reserved so far (exclusive end of the last range)
	Step        int       // step: the configured step; the engine may use more (dynamic step)
	Description string    // description
	UpdateTime  time.Time // update_time, as the store reports it (zero if unknown)
	// Mode is fixed by Create and kept by the store apart from the row:
	// Delete and Restart leave it as it is, and Create refuses another.
	Mode Mode
}

// Alloc is the result of one reservation: the row's max_id after it was
// advanced by Step. The ids it grants are [MaxID-Step, MaxID), exactly as
// Leaf's SegmentIDGenImpl uses a LeafAlloc (value = max_id - step).
type Alloc struct {
	Tag       wire.Tag
	MaxID     int64 // max_id after the update
	Step      int   // the step that was added (the custom step, or the table's step)
	TableStep int   // the step column as read in the same transaction
	Mode      Mode  // the tag's mode, as recorded by Create
}

// Start is the first id of the range.
func (a Alloc) Start() int64 { return a.MaxID - int64(a.Step) }

// End is one past the last id of the range.
func (a Alloc) End() int64 { return a.MaxID }

// Store keeps one row per tag and advances it atomically. It is the seam
// between the engine and a database (segment/mysql, segment/kvstore,
// segment/memstore). Implementations are safe for concurrent use, including
// from several processes sharing one database: two Advance calls on the same tag
// never return overlapping ranges, whichever node makes them.
//
// Tags come as wire.Tag, checked where the name entered the program; a
// store checks no name again, and the zero Tag finds no row (Create,
// Restart and HandBack refuse it with ErrInvalid).
//
// Every method returns an error wrapping ErrUnknownTag when the tag has no
// row, ErrInvalid for bad arguments (checked before any I/O), and
// ErrUnavailable when the backend cannot be reached; a context that ends
// returns an error wrapping ctx.Err().
type Store interface {
	// Advance adds step (1..MaxStep; 0: the configured step, as Leaf's
	// updateMaxIdAndGetLeafAlloc, else Leaf's
	// updateMaxIdByCustomStepAndGetLeafAlloc) to the tag's max_id and
	// returns the new row, durably committed before it returns. It refuses,
	// changing nothing, with an error wrapping ErrBelowFloor when max_id is
	// below floor (0: no floor), checked atomically with the advance, so a
	// refused call takes no range; and likewise when the store can tell
	// that max_id was lowered by hand (a history record, an earlier
	// revision).
	Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (Alloc, error)
	// Tags lists every tag name (Leaf's getAllTags), sorted.
	Tags(ctx context.Context) ([]string, error)
	// Modes maps every tag that has a row to its mode: how a node finds
	// the monotonic tags it competes to lead.
	Modes(ctx context.Context) (map[string]Mode, error)
	// Get reads one row.
	Get(ctx context.Context, tag wire.Tag) (Tag, error)
	// Create inserts a row; ErrTagExists if there is one, ErrTagDeleted if
	// the store remembers that the tag had one, ErrMode if the store
	// recorded another mode for the name. MaxID 0 means 1, Step 0 means
	// DefaultStep, the zero Mode KindSegment.
	Create(ctx context.Context, t Tag) error
	// SetStep changes the configured step of an existing tag.
	SetStep(ctx context.Context, tag wire.Tag, step int) error
	// SetMaxID raises max_id. Lowering it would hand out ids twice, so a
	// value below the current max_id is ErrInvalid.
	SetMaxID(ctx context.Context, tag wire.Tag, maxID int64) error
	// Delete removes a row. The store keeps a record that the tag existed
	// (and, where it can, its last max_id), so that Create refuses the
	// name with ErrTagDeleted; Restart brings it back.
	Delete(ctx context.Context, tag wire.Tag) error
	// Restart makes tag's max_id floor, creating the row when there is none
	// (a deleted tag, or one the store never knew): the explicit way to start
	// a tag over. floor must be at least 1 and at least every max_id the
	// store remembers for the tag (its row, its history), else the error
	// wraps ErrBelowFloor and nothing changes. A deleted tag comes back with
	// its last step when the store remembers it, else DefaultStep, and
	// always with the mode it was created with.
	Restart(ctx context.Context, tag wire.Tag, floor int64) error
	// Close releases the store's resources. Further calls return ErrClosed.
	Close() error
}

// DefaultStep is the step of a tag created without one (Leaf's examples use 2000).
const DefaultStep = 2000

// needTag refuses the zero wire.Tag where a row would be written for it
// (Create, Restart, HandBack): every other name was checked where it came
// in (wire.ParseTag), and the zero Tag finds no row.
func needTag(tag wire.Tag) error {
	if tag.IsZero() {
		return fmt.Errorf("%w: no tag (the zero wire.Tag)", ErrInvalid)
	}
	return nil
}

// CheckAdvanceStep checks Advance's step: 0 (the configured step) or
// 1..MaxStep. Stores call it before any I/O.
func CheckAdvanceStep(step int) error {
	if step == 0 {
		return nil
	}
	return CheckStep(step)
}

// CheckStep returns an error wrapping ErrInvalid when step is out of 1..MaxStep.
func CheckStep(step int) error {
	if step < 1 || step > MaxStep {
		return fmt.Errorf("%w: step %d must be 1-%d", ErrInvalid, step, MaxStep)
	}
	return nil
}

// Normalize checks a Tag for Create and fills its defaults (MaxID 1, Step
// DefaultStep). Stores call it before any I/O.
func Normalize(t Tag) (Tag, error) {
	if err := needTag(t.Name); err != nil {
		return t, err
	}
	if t.Step == 0 {
		t.Step = DefaultStep
	}
	if err := CheckStep(t.Step); err != nil {
		return t, err
	}
	if t.MaxID == 0 {
		t.MaxID = 1
	}
	if t.MaxID < 0 {
		return t, fmt.Errorf("%w: max_id %d must not be negative", ErrInvalid, t.MaxID)
	}
	if len(t.Description) > MaxDescLen {
		return t, fmt.Errorf("%w: description longer than %d bytes", ErrInvalid, MaxDescLen)
	}
	m, err := NormalizeMode(t.Mode)
	if err != nil {
		return t, err
	}
	t.Mode = m
	if m.Kind == KindOpaque && t.MaxID >= 1<<m.Width {
		return t, fmt.Errorf("%w: max_id %d does not fit an opaque tag of %d bits", ErrInvalid, t.MaxID, m.Width)
	}
	return t, nil
}

// CheckFloor returns an error wrapping ErrInvalid when floor cannot be a
// max_id (below 1), or ErrBelowFloor when it is below high, the highest
// max_id the store remembers for tag.
func CheckFloor(tag wire.Tag, floor, high int64) error {
	if err := needTag(tag); err != nil {
		return err
	}
	if floor < 1 {
		return fmt.Errorf("%w: tag %q: floor %d must be at least 1", ErrInvalid, tag, floor)
	}
	if floor < high {
		return fmt.Errorf("%w: tag %q: floor %d is below %d, the highest max_id the store recorded", ErrBelowFloor, tag, floor, high)
	}
	return nil
}

// Incarnation is implemented by stores that can tell their storage from a
// replacement of it: a KV bucket deleted and made again has a new
// incarnation. The engine remembers the incarnation it served from
// (Config.Floors) and refuses auto-create once it changes.
type Incarnation interface {
	// Incarnation names the storage the store uses now; it changes only
	// when the storage is replaced.
	Incarnation(ctx context.Context) (string, error)
}

// CheckAdvance returns an error wrapping ErrInvalid when advancing maxID by
// step would overflow int64: the tag has run out of ids.
func CheckAdvance(tag wire.Tag, maxID int64, step int) error {
	if maxID > (1<<63-1)-int64(step) {
		return fmt.Errorf("%w: tag %q: max_id %d + step %d overflows int64", ErrInvalid, tag, maxID, step)
	}
	return nil
}

// ErrMoved: a hand-back found the tag's max_id no longer where this node
// left it (another node reserved after it, or an operator changed it);
// nothing was changed.
var ErrMoved = wire.NewCodedError(wire.CodeUnavailable, "max_id moved on")

// HandBacker is implemented by stores that can take back the unserved end
// of the last range a node reserved, so that a node stopping gracefully
// leaves no gap.
type HandBacker interface {
	// HandBack sets tag's max_id from from back to to (1 <= to <= from),
	// only while max_id is still from, the end of the range the caller
	// reserved last: no one has reserved after it. Whatever the store
	// records to refuse a lowered max_id (a history table, earlier
	// revisions) is lowered with it, in the same write, so the next range
	// starts at to. Otherwise the error wraps ErrMoved and nothing changes.
	// The caller must hand back only ids it never handed out.
	HandBack(ctx context.Context, tag wire.Tag, from, to int64) error
}

// CheckHandBack checks HandBack's arguments.
func CheckHandBack(tag wire.Tag, from, to int64) error {
	if err := needTag(tag); err != nil {
		return err
	}
	if to < 1 || to > from {
		return fmt.Errorf("%w: tag %q: hand back from %d to %d: want 1 <= to <= from", ErrInvalid, tag, from, to)
	}
	return nil
}
