package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// peerFloors keeps the highest floor each tag's other nodes announced on
// leaf.floor.<tag>, and the mode they serve it in, so that the engine
// never takes a range below a floor a peer served
// (segment.Config.PeerFloor) nor serves a tag in another mode than a live
// peer (segment.Config.PeerMode). Every store takes part: a store keeps a
// tag's mode in a row an operator can delete, and only the nodes that
// served the tag remember it then. A store with an incarnation (JetStream
// KV) names it in every announcement, and floors of another incarnation do
// not count; on a store without one (MySQL) the name is "" on every node.
type peerFloors struct {
	node     string
	instance string // this process (wire.NodeStatus.Instance)
	store    string // this node's store incarnation; "" for a store without one
	max      int    // most tags kept
	mu       sync.Mutex
	m        map[string]int64
	modes    map[string]string // each tag's mode as peers announced it
	sub      *nats.Subscription
	all      *nats.Subscription // FloorsSubject
}

// startWindow is how long a starting node gathers its peers' floors
// (leaf.admin.floors).
const startWindow = 250 * time.Millisecond

// startPeerFloors subscribes to the announcements of the nodes on nc,
// answers leaf.admin.floors with own's floors, and asks the live nodes for
// theirs: a node that starts after its peers' last loads knows their
// floors and modes too. A store's incarnation that cannot be read is an
// ErrUnavailable (Start asks again): a node without its peers' floors and
// modes could serve a range they served, or a tag in another mode.
func (n *Node) startPeerFloors(ctx context.Context, own func() map[string]int64, ownModes func() map[string]string) (*peerFloors, error) {
	var inc string
	if is, ok := n.store.(segment.Incarnation); ok {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		inc, err = is.Incarnation(cctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w: reading the store's incarnation for the peer floors: %v", segment.ErrUnavailable, err)
		}
	}
	p := &peerFloors{node: n.cfg.Name, instance: n.instance, store: inc, max: max(n.cfg.Store.MaxTags, 10_000), m: map[string]int64{}, modes: map[string]string{}}
	var err error
	p.sub, err = n.nc.Subscribe(wire.FloorAnnouncePrefix+"*", p.heard)
	if err != nil {
		return nil, err
	}
	if own != nil {
		p.all, err = n.nc.Subscribe(wire.FloorsSubject, func(m *nats.Msg) {
			b, _ := json.Marshal(wire.NodeFloors{Node: p.node, Instance: p.instance, Store: p.store, Floors: own(), Modes: ownModes()})
			if err := m.Respond(b); err != nil {
				n.log.Warn("segment: answering leaf.admin.floors", "err", err)
			}
		})
		if err != nil {
			p.close()
			return nil, err
		}
		if err := n.nc.Flush(); err != nil {
			p.close()
			return nil, err
		}
		n.members.set(ctx, func(m *wire.Member) { m.Floors = true })
	}
	err = n.gatherPeers(ctx, wire.FloorsSubject, startWindow, func(m wire.Member) bool { return m.Floors }, func(m *nats.Msg) {
		var nf wire.NodeFloors
		if json.Unmarshal(m.Data, &nf) != nil || nf.Store != p.store || p.self(nf.Node, nf.Instance) {
			return
		}
		for tag, f := range nf.Floors {
			p.raise(tag, f, nf.Modes[tag])
		}
	})
	if err != nil {
		// Start asks again, for any failure of the gather: a node that
		// went on without its peers' floors could take a range below one
		// of them.
		p.close()
		return nil, fmt.Errorf("%w: asking the live nodes for their floors: %v", ErrPeersSilent, err)
	}
	return p, nil
}

// self reports whether an announcement of node (instance) is this
// process's own; a node of an older version sends no instance: its name
// decides.
func (p *peerFloors) self(node, instance string) bool {
	if instance == "" {
		return node == p.node
	}
	return instance == p.instance
}

// heard records one announcement.
func (p *peerFloors) heard(m *nats.Msg) {
	tag := strings.TrimPrefix(m.Subject, wire.FloorAnnouncePrefix)
	var a wire.FloorAnnounce
	if json.Unmarshal(m.Data, &a) != nil || a.Store != p.store || p.self(a.Node, a.Instance) {
		return
	}
	p.raise(tag, a.Floor, a.Mode)
}

// raise records a peer's floor of tag, and the mode it serves the tag in
// ("" if it did not say).
func (p *peerFloors) raise(tag string, floor int64, mode string) {
	if _, err := wire.ParseTag(tag); err != nil || floor <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.m[tag]; ok || len(p.m) < p.max {
		p.m[tag] = max(cur, floor)
		if mode != "" {
			p.modes[tag] = mode
		}
	}
}

// mode is the mode peers announced for tag; "" if none did.
func (p *peerFloors) mode(tag string) string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.modes[tag]
}

// floor is the highest floor of tag heard from a peer; 0 if none.
func (p *peerFloors) floor(tag string) int64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[tag]
}

// announce publishes this node's new floor of tag (after a load), with
// the mode it serves the tag in.
func (p *peerFloors) announce(nc *nats.Conn, tag string, end int64, mode string) {
	if p == nil {
		return
	}
	b, _ := json.Marshal(wire.FloorAnnounce{Node: p.node, Instance: p.instance, Store: p.store, Floor: end, Mode: mode})
	_ = nc.Publish(wire.FloorAnnouncePrefix+tag, b)
}

func (p *peerFloors) close() {
	if p == nil {
		return
	}
	for _, s := range []*nats.Subscription{p.sub, p.all} {
		if s != nil {
			_ = s.Unsubscribe()
		}
	}
}

// answerFloors answers leaf.admin.floor.<tag> with this node's floor of
// the tag (0: none) from n.floors, which holds every range the engine
// loaded before it hands out an id of it (segment.Floors.Raise). It runs
// from before the node joins the members until its stop (before the
// hand-back), so every member whose record says Serving answers: a
// restarting node holds ranges from its floor file and engine.Start on,
// long before its responder runs. (The responder answers the subject too
// once it runs; an asker takes the highest answer of each node.)
func (n *Node) answerFloors() error {
	var err error
	n.floorAns, err = n.nc.Subscribe(wire.FloorPrefix+"*", func(m *nats.Msg) {
		tag, err := wire.ParseTag(strings.TrimPrefix(m.Subject, wire.FloorPrefix))
		if err != nil {
			return // the responder, once it runs, answers a bad tag with a 400
		}
		b, _ := json.Marshal(wire.NodeFloor{Node: n.cfg.Name, Instance: n.instance, Tag: tag.String(), Floor: n.floors.Floor(tag.String())})
		if err := m.Respond(b); err != nil {
			n.log.Warn("segment: answering "+m.Subject, "err", err)
		}
	})
	if err != nil {
		return err
	}
	return n.nc.Flush()
}

// stopFloorAnswers ends answerFloors; a second call does nothing.
func (n *Node) stopFloorAnswers() {
	if n.floorAns != nil {
		_ = n.floorAns.Unsubscribe()
	}
}

// createWindow is how long an auto-create waits for the live nodes' floors
// of the tag (leaf.admin.floor.<tag>); the first request of a new tag waits
// up to segment.Config.ColdWait anyway.
const createWindow = 150 * time.Millisecond

// createCheck refuses to auto-create a tag that a live node has received
// ids of: the store lost it (a replaced bucket, a purged stream, a deleted
// row), and this node, new or on a new data directory, has no floor of its
// own to notice. It waits for every live member that serves (gatherPeers);
// a node that is no member (no JetStream) is heard within the window only.
func (n *Node) createCheck(ctx context.Context, tag wire.Tag) error {
	high, who, err := n.peersFloor(ctx, tag, createWindow)
	if err != nil {
		return fmt.Errorf("%w: tag %q: asking the live nodes before creating it: %w", segment.ErrUnavailable, tag, err)
	}
	if high > 0 {
		return &segment.PeerFloorError{Tag: tag, Node: who, Floor: high}
	}
	return nil
}

// peersFloor is the highest floor of tag among the live nodes
// (leaf.admin.floor.<tag>) and the node that has it, waiting past window
// for every member that serves (gatherPeers): for an auto-create here and
// for the responder's tag create and restart (responder.Config.PeerFloor),
// which gathered for their window alone and could take a slow peer's
// floor for none.
func (n *Node) peersFloor(ctx context.Context, tag wire.Tag, window time.Duration) (high int64, who string, err error) {
	err = n.gatherPeers(ctx, wire.FloorPrefix+tag.String(), window, func(m wire.Member) bool { return m.Serving }, func(m *nats.Msg) {
		var f wire.NodeFloor
		if json.Unmarshal(m.Data, &f) == nil && f.Tag == tag.String() && f.Floor > high {
			high, who = f.Floor, f.Node
		}
	})
	// This node's own floor counts as a live node's: the gather waits for
	// the other members only (and, with a complete list, for no window in
	// which this node's own answer would arrive), and a restart or create
	// below what this node issued is as wrong as below a peer's
	// (TestReplacedBucketThroughLeafd).
	if f := n.floors.Floor(tag.String()); f > high {
		high, who = f, n.cfg.Name
	}
	return high, who, err
}
