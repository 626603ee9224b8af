package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// The node's side of package peers: what it answers while it starts, and
// the peers' answers turned into the errors of node, segment and snowflake.

// hostName is this host's name, as the status of the node shows it.
var hostName, _ = os.Hostname()

// who is the part of the node's status that says which process answers:
// set before the node subscribes, so safe from any goroutine.
func (n *Node) who() wire.NodeStatus {
	return wire.NodeStatus{
		Node:     n.cfg.Name,
		Instance: n.peers.Instance(),
		Host:     hostName,
		PID:      os.Getpid(),
		Version:  buildinfo.Version,
		UnixNano: n.clock.Now().UnixNano(),
		Started:  n.start.At.UnixNano(),
		Tags:     []wire.TagStatus{},
	}
}

// startingStatus is what a starting node answers (peers.Config.Status):
// who it is, and the worker id it registers. It reads only what is set
// before the node subscribes, and atomics.
func (n *Node) startingStatus() wire.NodeStatus {
	st := n.who()
	st.Problems, st.Starting = []string{"starting"}, true
	st.Snow = n.serve.sf.Starting()
	return st
}

// checkName is peers.Set.CheckName, a name taken a configuration error:
// the node refuses to start beside a live node with its name.
func (n *Node) checkName(ctx context.Context) error {
	err := n.peers.CheckName(ctx)
	if errors.Is(err, peers.ErrNameTaken) {
		return fmt.Errorf("%w: %w: every node needs its own --name (LEAF_NAME); stop that one first to move it here", config.ErrConfig, err)
	}
	return err
}

// peerHolder is snownode.Config.Holder: the live node other than this
// process that serves worker or registers it, "" if none does. The
// snownode.Server puts its claim in this node's status (startingStatus,
// status) before it asks, as peers.Set.Holder requires.
func (n *Node) peerHolder(ctx context.Context, worker int64) (string, error) {
	p, ok, err := n.peers.Holder(ctx, worker)
	if err != nil || !ok {
		return "", err
	}
	return fmt.Sprintf("live %s (worker registry %s, %s)", peers.Describe(p), p.Snow.Registry, p.Snow.State), nil
}

// createCheck is the segment.Config.CreateCheck: no auto-create of a tag a
// live node has received ids of (the store lost it, and this node, new or
// on a new data directory, has no floor of its own to notice).
func (n *Node) createCheck(ctx context.Context, tag wire.Tag) error {
	high, who, err := n.peers.HighestFloor(ctx, tag, peers.CreateWindow)
	if err != nil {
		return fmt.Errorf("%w: tag %q: asking the live nodes before creating it: %w", segment.ErrUnavailable, tag, err)
	}
	if high > 0 {
		return &segment.PeerFloorError{Tag: tag, Node: who, Floor: high}
	}
	return nil
}

// incarnation names the segment store's incarnation for the floors heard
// and announced ("" for a store without one). One that cannot be read is
// an ErrUnavailable (Start asks again): a node without its peers' floors
// and modes could serve a range they served, or a tag in another mode.
func (n *Node) incarnation(ctx context.Context) (string, error) {
	is, ok := n.seg.store.(segment.Incarnation)
	if !ok {
		return "", nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	inc, err := is.Incarnation(cctx)
	if err != nil {
		return "", fmt.Errorf("%w: reading the store's incarnation for the peer floors: %v", segment.ErrUnavailable, err)
	}
	return inc, nil
}

// newPeers makes this node's peers.Set: its status and its floors answered
// once started (startPeers).
func (b *boot) newPeers(context.Context) error {
	var err error
	b.peers, err = peers.New(peers.Config{
		Conn:      b.conn.NC(),
		Name:      b.cfg.Name,
		Instance:  b.instance,
		Clock:     b.clock,
		Log:       b.log,
		Replicas:  b.cfg.Store.KVReplicas,
		OwnServer: b.conn.Server() != nil,
		Status:    b.startingStatus,
		Scope:     b.scope(),
		Floor:     b.seg.floors.Floor,
	})
	return err
}

// startPeers answers the node's status and its floors from before it is a
// member: a node restarting with ranges of a tag (its floor file, or loads
// from engine.Start on) answers leaf.admin.floor.<tag> before its
// responder runs, and its record says so (Serving), so a newcomer's
// auto-create waits for it (TestRestartingNodeFloorsHeard); nodes that
// start at the same moment see each other's name and worker-id claim.
func (n *Node) startPeers(ctx context.Context) error { return n.peers.Start(ctx) }

func (n *Node) closePeers(ctx context.Context) error { return n.peers.Close(ctx) }

// joinPeers is one attempt to join the members, tried again while
// JetStream does not answer (a cluster electing its leader, the bucket's
// server restarting): a node that gave up would stay no member for good,
// and slow answers of its would go unheard. Only a NATS without JetStream
// leaves the node without members.
func (b *boot) joinPeers(ctx context.Context) error { return b.peers.Join(ctx, b.prev) }

// startedPeers tells the members the node serves.
func (n *Node) startedPeers(ctx context.Context) error { return n.peers.Started(ctx) }

// leavePeers leaves the members, first of all a stopping node does: the
// others stop waiting for its answers before it stops giving them.
func (n *Node) leavePeers(ctx context.Context) error { return n.peers.Leave(ctx) }
