package responder

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// floorWindow is how long a tag restart or create gathers the floors of
// the live nodes: they answer from memory, within a few milliseconds.
const floorWindow = 250 * time.Millisecond

// handleFloor answers Scope.FloorPrefix()+<tag> (leaf.admin.floor.<tag>
// without regions) with this node's floor of the tag. Every node answers (no queue group).
func (r *Responder) handleFloor(req micro.Request) {
	tag, err := wire.ParseTag(strings.TrimPrefix(req.Subject(), r.cfg.Scope.FloorPrefix()))
	if err != nil {
		r.fail(req, err)
		return
	}
	r.respondJSON(req, wire.NodeFloor{Node: r.cfg.Node, Instance: r.cfg.Instance, Tag: tag.String(), Floor: r.cfg.Floor(tag.String())})
}

// checkPeerFloors refuses (ErrBelowFloor) to start tag at floor when a live
// node has received ids of it at or beyond floor: the store may have
// forgotten them (a key deleted twice, a purge, a replaced bucket, an
// edited history), the nodes have not. A node that does not answer (and
// that PeerFloor does not wait for) is not asked: the store's own record
// and the nodes' refusals of ranges below their floors remain.
func (r *Responder) checkPeerFloors(ctx context.Context, tag wire.Tag, floor int64, op string) error {
	if r.cfg.Floor == nil {
		return nil
	}
	peerFloor := r.cfg.PeerFloor
	if peerFloor == nil {
		peerFloor = func(ctx context.Context, tag wire.Tag, window time.Duration) (int64, string, error) {
			return ask.Floors(ctx, r.cfg.Conn, r.cfg.Scope, tag, window)
		}
	}
	high, who, err := peerFloor(ctx, tag, floorWindow)
	if err != nil {
		return fmt.Errorf("%w: tag %s of %q: %w", segment.ErrUnavailable, op, tag, err)
	}
	if floor < high {
		return fmt.Errorf("%w: tag %s of %q at %d: node %s has received ids of it up to %d; use a floor of at least %d",
			segment.ErrBelowFloor, op, tag, floor, who, high, high)
	}
	return nil
}
