package node

import (
	"context"
	"errors"
	"slices"

	"github.com/leafmq/leafmq/segment"
)

// handBack gives the store back, for each segment tag, the ids at the top
// of the last range this node reserved that it never handed out — what is
// left in its buffers, and in its ring when the ring holds the ids just
// below them — so that a graceful restart continues the tag without a
// gap. The store takes them back only while no one reserved after
// this node (segment.HandBacker, a compare-and-swap). Ids in the batch pool
// and in clients' caches were handed out, and stay so.
//
// Only a node that is alone does it: a live peer may have heard this
// node's floors (leaf.floor.<tag>), which stay above the max_id handed
// back, and would take its next range above them, skipping the ids handed
// back. A peer that did not answer (frozen, cut off) does so when it wakes
// (segment.Config.PeerFloor): never an id twice, and never a tag refused
// for good. The node stops answering for its floors first, so a node that
// starts meanwhile cannot learn them. Its own floor of the
// tag goes down to where its served ids end, fsynced, before the store's.
// Called by Close once no request can reach the engine or the rings.
func (n *Node) handBack(ctx context.Context) {
	hb, ok := n.seg.store.(segment.HandBacker)
	if !ok {
		return
	}
	lower, _ := n.seg.floors.(interface {
		Lower(tag string, floor int64) error
	})
	other, err := n.peers.Other(ctx)
	if err != nil {
		n.log.Info("segment: no hand-back: the live nodes could not be asked", "err", err)
		return
	}
	if other != "" {
		n.log.Info("segment: no hand-back: another node is alive", "node", other)
		return
	}
	rings := n.seg.prod.Retire()
	for _, u := range n.seg.engine.Retire() {
		to := u.To
		if ids := rings[u.Tag]; !u.Opaque && contiguousBelow(ids, to) {
			to -= int64(len(ids))
		}
		if to >= u.From {
			continue
		}
		if lower != nil {
			if err := lower.Lower(u.Tag.String(), to); err != nil {
				n.log.Warn("segment: no hand-back: lowering the floor", "tag", u.Tag, "err", err)
				continue
			}
		}
		err := hb.HandBack(ctx, u.Tag, u.From, to)
		switch {
		case err == nil:
			n.log.Info("segment: handed back the unserved ids", "tag", u.Tag, "max_id_was", u.From, "max_id", to, "ids", u.From-to)
		case errors.Is(err, segment.ErrMoved):
			n.log.Debug("segment: no hand-back: the tag moved on", "tag", u.Tag, "err", err)
		default:
			n.log.Warn("segment: hand-back failed", "tag", u.Tag, "err", err)
		}
	}
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
