package segment

import (
	"context"
	"errors"
	"slices"

	"github.com/leafmq/leafmq/wire"
)

// HandBack retires the engine (Retire) and gives the store back, for each
// tag, the ids at the top of the last range the engine reserved that it
// never handed out — what is left in its buffers, and in rings (the
// caller's, by tag: producer.Producer.Retire) when a ring holds the ids
// just below them — so that a graceful restart continues the tag without a
// gap (issue #15). The store takes them back only while no one reserved
// after this node (HandBacker, a compare-and-swap), so every range any
// node serves stays above every floor (I1 in docs/protocol.md). The tag's
// own floor (Config.Floors) goes down first to where its served ids end,
// fsynced, before the store's. Ids handed out by the engine (to the pool
// or a client's cache) stay handed out. A store that cannot take ids back
// leaves the engine as it was.
//
// The caller hands back only while no live node can have heard this
// node's floors (a peer would take its next range above them, skipping the
// ids handed back), and only once no request can reach the engine or the
// rings.
func (e *Engine) HandBack(ctx context.Context, rings map[wire.Tag][]int64) {
	hb, ok := e.cfg.Store.(HandBacker)
	if !ok {
		return
	}
	lower, _ := e.cfg.Floors.(interface {
		Lower(tag string, floor int64) error
	})
	for _, u := range e.Retire() {
		to := u.To
		if !u.Opaque {
			if ids := e.locals(rings[u.Tag]); contiguousBelow(ids, to) {
				to -= int64(len(ids))
			}
		}
		if to >= u.From {
			continue
		}
		if lower != nil {
			if err := lower.Lower(u.Tag.String(), to); err != nil {
				e.log.Warn("segment: no hand-back: lowering the floor", "tag", u.Tag, "err", err)
				continue
			}
		}
		err := hb.HandBack(ctx, u.Tag, u.From, to)
		switch {
		case err == nil:
			e.log.Info("segment: handed back the unserved ids", "tag", u.Tag, "max_id_was", u.From, "max_id", to, "ids", u.From-to)
		case errors.Is(err, ErrMoved):
			e.log.Debug("segment: no hand-back: the tag moved on", "tag", u.Tag, "err", err)
		default:
			e.log.Warn("segment: hand-back failed", "tag", u.Tag, "err", err)
		}
	}
}

// locals maps the ids a ring holds back to this region's local sequence
// numbers, in which Unserved counts (Config.Regions); nil when one is not
// this region's: such a ring is not the run below an Unserved.
func (e *Engine) locals(ids []int64) []int64 {
	rg := e.cfg.Regions
	if !rg.Many() {
		return ids
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		l, r, ok := rg.Local(id)
		if !ok || r != rg.R {
			return nil
		}
		out[i] = l
	}
	return out
}

// contiguousBelow reports whether ids are exactly the run [to-len, to).
func contiguousBelow(ids []int64, to int64) bool {
	if len(ids) == 0 {
		return false
	}
	s := slices.Clone(ids)
	slices.Sort(s)
	for i, id := range s {
		if id != to-int64(len(s))+int64(i) {
			return false
		}
	}
	return true
}
