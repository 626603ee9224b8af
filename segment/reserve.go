package segment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/leafmq/leafmq/wire"
)

// Announcer tells the other nodes on the same store that this node
// received a tag's ids up to end (exclusive), served in mode
// (Mode.String()). The node wires it to NATS; it must not block.
type Announcer interface {
	Announce(tag string, end int64, mode string)
}

// Reserver takes ranges of a tag's ids from a Store, each above every
// floor known for the tag, records the floor and announces it before the
// range is returned: the one rule by which the engine's loads and a
// monotonic tag's leader (package mono) reserve. Safe for concurrent use
// when its fields are.
//
// A range is returned only when it starts at or above the tag's floor,
// the higher of this node's own (Floors) and the peers' (PeerFloor): ids
// below a floor were handed out, or handed back, and are never served
// again. A store below the peers' floor but not below this node's own is
// raised to the peers' floor first (Store.SetMaxID) and the range taken
// above it; a store below this node's own floor stays refused
// (ErrBelowFloor), for an operator to restart the tag.
type Reserver struct {
	Store Store // required
	// Floors keeps this node's floor of each tag; nil: no floor of its own
	// is kept or checked.
	Floors Floors
	// PeerFloor, if set, is the highest floor of a tag that the other
	// nodes announced; an error when they are not known now (this node
	// may have missed an announcement), which refuses the range
	// (ErrUnavailable). Must not block.
	PeerFloor func(tag string) (int64, error)
	// Announce, if set, hears the end of every range returned, after the
	// floor was raised and before the caller serves an id of it.
	Announce Announcer
	// Accept, if set, is asked about every range the store granted at or
	// above the floor, before its floor is raised; an error refuses the
	// range (the floor is raised all the same: the store advanced past
	// it) and nothing is announced.
	Accept func(Alloc) error
	// RequireFloor refuses a range whose floor could not be recorded
	// (Floors.Raise failed). Without it such a range is served, and the
	// failure logged: the store is the source of truth, the floor a second
	// guard (the engine's choice; a monotonic leader refuses).
	RequireFloor bool
	// Replaced, if set, hears that the store's incarnation changed under
	// a range (see reserve): old is the incarnation the range was asked
	// of, cur the store's now. The engine turns auto-create off, as for a
	// replacement found at start (Engine.checkIncarnation).
	Replaced func(old, cur string)
	Logger   *slog.Logger // default slog.Default()

	// known is the store's incarnation as last read: before this
	// Reserver's first range, then after each range. Stores without an
	// Incarnation leave it nil.
	known atomic.Pointer[string]
}

// Reserve takes the next range of tag, of step ids (0: the tag's stored
// step), under the rule of the Reserver.
func (r *Reserver) Reserve(ctx context.Context, tag wire.Tag, step int) (Alloc, error) {
	return r.reserve(ctx, tag, step, r.Accept)
}

// reserve is Reserve with accept in place of r.Accept (the engine's is per
// tag).
func (r *Reserver) reserve(ctx context.Context, tag wire.Tag, step int, accept func(Alloc) error) (Alloc, error) {
	name := tag.String()
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	var own, peer int64
	if r.Floors != nil {
		own = r.Floors.Floor(name)
	}
	if r.PeerFloor != nil {
		var err error
		if peer, err = r.PeerFloor(name); err != nil {
			return Alloc{}, fmt.Errorf("%w: tag %q: %w", ErrUnavailable, name, err)
		}
	}
	floor := max(own, peer)
	inc, err := r.incarnation(ctx)
	if err != nil {
		return Alloc{}, err
	}
	// The store checks the floor before it advances: a refused load takes
	// no range. Each refused load that took one would move the row on, and
	// after a few it would pass this node's floor and grant ranges that
	// other nodes served.
	a, err := r.Store.Advance(ctx, tag, step, floor)
	if peer > own && errors.Is(err, ErrBelowFloor) && r.raiseToPeer(ctx, tag, log, own, peer) {
		a, err = r.Store.Advance(ctx, tag, step, floor)
	}
	if errors.Is(err, ErrBelowFloor) {
		log.Error("segment: the store is below the tag's floor", "tag", name, "floor", floor, "err", err)
		err = fmt.Errorf("%w (this node received ids of %q up to %d, the nodes up to %d; restart the tag at or above the highest such floor of every node: leafctl tag restart %s --floor N)",
			err, name, own, floor, name)
	}
	if err == nil && a.Step < 1 {
		err = fmt.Errorf("%w: store returned step %d", ErrInvalid, a.Step)
	}
	if err == nil && floor > 0 && a.Start() < floor {
		// The floor guard, for a store that granted below the floor it
		// was given: never serve a range below one this node or a peer
		// received before (a lowered max_id, a row or key deleted and made
		// again, a replaced bucket).
		err = fmt.Errorf("%w: tag %q: the store granted [%d,%d), but this node or a peer already received ids up to %d: "+
			"max_id was lowered, or the row, key or bucket was deleted and made again; no id is served from it "+
			"(restart the tag at or above %d: leafctl tag restart %s --floor %d)",
			ErrBelowFloor, name, a.Start(), a.End(), floor, floor, name, floor)
		log.Error("segment: refused a range below the tag's floor", "tag", name,
			"start", a.Start(), "end", a.End(), "floor", floor)
	}
	if err != nil {
		return Alloc{}, err
	}
	var refuse error
	if accept != nil {
		refuse = accept(a)
	}
	if r.Floors != nil {
		// After Accept: a mode it keeps (ModeKeeper) goes to disk with
		// the floor's write, before any id of the range is served.
		if ferr := r.Floors.Raise(name, a.End()); ferr != nil {
			log.Error("segment: recording the tag's floor", "tag", name, "end", a.End(), "err", ferr)
			if r.RequireFloor && refuse == nil {
				refuse = fmt.Errorf("recording the floor of %q: %w", tag, ferr)
			}
		}
	}
	if refuse == nil {
		refuse = r.checkIncarnation(ctx, name, a, inc, log)
	}
	if refuse != nil {
		return Alloc{}, refuse
	}
	if r.Announce != nil {
		r.Announce.Announce(name, a.End(), a.Mode.String())
	}
	return a, nil
}

// incarnation returns the store's incarnation as this Reserver knows it,
// before a range is asked of the store: the last one read, or, for the
// first range, one read now. "" for a store without an Incarnation.
func (r *Reserver) incarnation(ctx context.Context) (string, error) {
	is, ok := r.Store.(Incarnation)
	if !ok {
		return "", nil
	}
	if p := r.known.Load(); p != nil {
		return *p, nil
	}
	cur, err := is.Incarnation(ctx)
	if err != nil {
		return "", fmt.Errorf("segment: reading the store's incarnation: %w", err)
	}
	r.known.CompareAndSwap(nil, &cur)
	return *r.known.Load(), nil
}

// checkIncarnation keeps I1 (docs/protocol.md: no id handed out twice)
// across a store replaced while a range is in flight. It runs after the
// range's floor was recorded and before any id of it is served, and reads
// the store's incarnation afresh: a range granted by a store that is no
// longer the one it was asked of (inc) is dropped, a gap never served.
//
// Why that is enough: a node B auto-creating the tag in the new store read
// it missing only after the replacement, and asks this node's floor after
// that. If this node recorded the floor before B asked, B hears it and
// refuses the create (createCheck); if it recorded it after B asked, this
// read comes after the replacement too, sees the new incarnation, and the
// range is dropped. Either way no id is served by both.
//
// inc is the incarnation known before the range was asked: a range asked
// of the new store after a replacement this Reserver had not yet seen is
// dropped too (one range lost, no id repeated). Stores without an
// Incarnation (MySQL: a table is not replaced behind a live node's back
// without the row's history) skip the check. The cost is one store read
// per range (KV: a stream info request).
func (r *Reserver) checkIncarnation(ctx context.Context, name string, a Alloc, inc string, log *slog.Logger) error {
	is, ok := r.Store.(Incarnation)
	if !ok {
		return nil
	}
	cur, err := is.Incarnation(ctx)
	if err != nil {
		log.Error("segment: reading the store's incarnation after a range; dropping the range", "tag", name,
			"start", a.Start(), "end", a.End(), "err", err)
		return fmt.Errorf("%w: tag %q: the store's incarnation could not be read after reserving [%d,%d); no id of it is served: %w",
			ErrUnavailable, name, a.Start(), a.End(), err)
	}
	if cur == inc {
		return nil
	}
	if p := r.known.Load(); p != nil && *p == inc {
		r.known.CompareAndSwap(p, &cur)
	}
	log.Error("segment: the store was replaced while a range was reserved; dropping the range", "tag", name,
		"start", a.Start(), "end", a.End(), "asked_of", inc, "now", cur)
	if r.Replaced != nil {
		r.Replaced(inc, cur)
	}
	return fmt.Errorf("%w: tag %q: the store was %q when [%d,%d) was reserved and is %q now; no id of the range is served",
		ErrStoreChanged, name, inc, a.Start(), a.End(), cur)
}

// raiseToPeer handles a reservation refused below a peer's floor of the
// tag but not below this node's own: it raises the store's max_id to the
// peer's floor (Store.SetMaxID, which never lowers it) and reports
// whether the reservation is to be made again, above that floor.
//
// Ids below a floor are issued or handed back; reserving above every
// floor any node has seen can repeat none, it only skips ids. A peer's
// floor may be above the store's max_id for good: the peer stopped
// gracefully and handed back the unserved top of its last range while
// this node was frozen or cut off and did not answer its check, so that
// this node kept the floor it had heard. Refused, the tag would serve no
// id until max_id passed that floor again (TestHandBackWhileAPeerIsFrozen).
// A store below this node's own floor went back under ids this node
// served (its own hand-back lowers its floor first): that stays refused,
// for an operator to restart the tag.
func (r *Reserver) raiseToPeer(ctx context.Context, tag wire.Tag, log *slog.Logger, own, peer int64) bool {
	row, err := r.Store.Get(ctx, tag)
	if err != nil {
		return false
	}
	at := row.MaxID // where the store's max_id stood
	if at < own || at >= peer {
		return false
	}
	serr := r.Store.SetMaxID(ctx, tag, peer)
	if serr != nil && !errors.Is(serr, ErrInvalid) { // ErrInvalid: max_id passed the floor meanwhile
		log.Warn("segment: raising max_id to a peer's floor", "tag", tag.String(), "floor", peer, "err", serr)
		return false
	}
	log.Warn("segment: the store is below a floor another node announced (a hand-back this node did not hear, or max_id lowered); "+
		"reserving above it: the ids between are skipped", "tag", tag.String(), "max_id", at, "peer_floor", peer, "own_floor", own)
	return true
}
