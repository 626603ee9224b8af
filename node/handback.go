package node

import (
	"context"

	"github.com/leafmq/leafmq/segment"
)

// handBack has the engine hand back what this node reserved and did not
// serve (segment.Engine.HandBack), from its buffers and its rings, so that
// a graceful restart continues each tag without a gap.
//
// Only a node that is alone does it: a live peer may have heard this
// node's floors (leaf.floor.<tag>), which stay above the max_id handed
// back, and would take its next range above them, skipping the ids handed
// back. A peer that did not answer (frozen, cut off) does so when it wakes
// (segment.Config.PeerFloor): never an id twice, and never a tag refused
// for good. The node stops answering for its floors first, so a node that
// starts meanwhile cannot learn them. Called by Close once no request can
// reach the engine or the rings.
func (n *Node) handBack(ctx context.Context) {
	if _, ok := n.seg.store.(segment.HandBacker); !ok {
		return
	}
	other, err := n.peers.Other(ctx)
	if err != nil {
		n.log.Info("segment: no hand-back: the live nodes could not be asked", "err", err)
		return
	}
	if other != "" {
		n.log.Info("segment: no hand-back: another node is alive", "node", other)
		return
	}
	n.seg.engine.HandBack(ctx, n.seg.prod.Retire())
}
