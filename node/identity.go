package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/wire"
	"github.com/nats-io/nats.go"
)

// hostName is this host's name, as the status of the node shows it.
var hostName, _ = os.Hostname()

// newInstance is a random id of this process (wire.NodeStatus.Instance).
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// peerWindow is how long the node gathers the live nodes' status when it
// checks its name and its worker id against them.
const peerWindow = 300 * time.Millisecond

// window is how long the node gathers the live nodes' answers: peerWindow
// plus twice its own round trip to its server (a question and its answers
// cross the node's link twice: a node 200 ms from NATS hears no peer in
// 300 ms and would take a worker id a live node serves), at most 5 s.
func (n *Node) window() time.Duration {
	rtt, err := n.nc.RTT()
	if err != nil {
		return peerWindow
	}
	return min(peerWindow+2*rtt, 5*time.Second)
}

// isSelf reports whether st is this process's own answer. A node of an
// older version sends no instance: its name decides.
func (n *Node) isSelf(st wire.NodeStatus) bool {
	if st.Instance == "" {
		return st.Node == n.cfg.Name
	}
	return st.Instance == n.instance
}

// describe names a live node for an error or a log line.
func describe(st wire.NodeStatus) string {
	s := "node " + st.Node
	if st.PID != 0 {
		s += fmt.Sprintf(" (pid %d on host %s", st.PID, st.Host)
		if st.Started != 0 {
			s += ", started " + time.Unix(0, st.Started).UTC().Format(time.RFC3339)
		}
		s += ")"
	}
	return s
}

// checkName refuses to start beside a live node with this node's name. The
// checks against live peers (their floors, their worker ids and layout,
// whether any is alive before a hand-back) skip the node's own name: a
// second process under it would be taken for this one, and the checks that
// keep ids from repeating would pass unseen.
func (n *Node) checkName(ctx context.Context) error {
	peers, err := n.askStatus(ctx)
	if err != nil {
		// Start asks again. Going on unasked (a connection that closed
		// under the gather) would let a second process under this name
		// pass every check below.
		return fmt.Errorf("%w: asking whether a live node has this name: %v", ErrPeersSilent, err)
	}
	for _, p := range peers {
		if p.Node == n.cfg.Name && !n.isSelf(p) {
			return fmt.Errorf("%w: a live %s answers under this node's name: every node needs its own --name (LEAF_NAME); "+
				"stop that one first to move it here", ErrConfig, describe(p))
		}
	}
	return nil
}

// peerStatus gathers the live nodes' status for the checks of one
// registration (peerHolder, peerLease, noPeerServes), asking at most once
// a second.
func (n *Node) peerStatus(ctx context.Context) ([]wire.NodeStatus, error) {
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	if n.view.at.IsZero() || n.clock.Since(n.view.at) > time.Second {
		n.view.seen, n.view.err = n.askStatus(ctx)
		n.view.at = n.clock.Now()
	}
	return n.view.seen, n.view.err
}

// peerLease is the snowflake.SourceConfig.PeerLease: the highest time
// lease a live node other than this process reports for worker among the
// worker ids it held and lost.
func (n *Node) peerLease(ctx context.Context, worker int64) (time.Time, error) {
	peers, err := n.peerStatus(ctx)
	if err != nil {
		return time.Time{}, err // the registration is tried again
	}
	var high int64
	for _, p := range peers {
		if n.isSelf(p) || p.Snow == nil {
			continue
		}
		for _, wl := range p.Snow.Past {
			if wl.Worker == worker {
				high = max(high, wl.Until)
			}
		}
	}
	if high == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, high), nil
}

// peerHolder is the snowflake.SourceConfig.Holder: the live node other
// than this process that reports worker as its worker id, or as the one it
// is registering, "" if none does (or none could be asked).
//
// The claim goes into this node's status before it asks, and it asks
// afresh, not from the cache. Of two nodes A and B that register one
// worker id at the same moment: if A's question reached B before B's
// claim, B asked after that, so after A's claim, and sees it. At least
// one of the two refuses (both may; never neither).
func (n *Node) peerHolder(ctx context.Context, worker int64) (string, error) {
	n.view.mu.Lock()
	n.view.at = time.Time{}
	n.view.mu.Unlock()
	peers, err := n.peerStatus(ctx)
	if err != nil {
		return "", err // one of them may hold it: ask again later
	}
	for _, p := range peers {
		if !n.isSelf(p) && holds(p, worker) {
			return fmt.Sprintf("live %s (worker registry %s, %s)", describe(p), p.Snow.Registry, p.Snow.State), nil
		}
	}
	return "", nil
}

// holds reports whether the live node p serves worker, or registers it.
func holds(p wire.NodeStatus, worker int64) bool {
	return p.Snow != nil && (p.Snow.Worker == worker || p.Snow.Claim != nil && *p.Snow.Claim == worker)
}

// answerStarting answers leaf.admin.status from the node's first
// connection until its responder does (stopStarting): with its name,
// process and, while it registers a snowflake worker id, that id. Nodes
// that start at the same moment so see each other in their checks: the
// name (checkName) and the worker id (peerHolder). The subscription is
// flushed before the node asks anyone, so a question sent after this node
// asked its own reaches it.
func (n *Node) answerStarting(ctx context.Context) error {
	sub, err := n.nc.Subscribe(wire.StatusSubject, func(m *nats.Msg) {
		if b, err := json.Marshal(n.startingStatus()); err == nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return fmt.Errorf("answer %s while starting: %w", wire.StatusSubject, err)
	}
	n.early = sub
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("answer %s while starting: %w", wire.StatusSubject, err)
	}
	return nil
}

// who is the part of the node's status that says which process answers:
// set before the node subscribes, so safe from any goroutine.
func (n *Node) who() wire.NodeStatus {
	return wire.NodeStatus{
		Node:     n.cfg.Name,
		Instance: n.instance,
		Host:     hostName,
		PID:      os.Getpid(),
		Version:  buildinfo.Version,
		UnixNano: n.clock.Now().UnixNano(),
		Started:  n.started.UnixNano(),
		Tags:     []wire.TagStatus{},
	}
}

// startingStatus is what a starting node answers: who it is, and the
// worker id it registers. It reads only what is set before the node
// subscribes, and atomics.
func (n *Node) startingStatus() wire.NodeStatus {
	st := n.who()
	st.Problems, st.Starting = []string{"starting"}, true
	st.Snow = n.sf.Starting()
	return st
}

// stopStarting ends answerStarting once the responder answers the status.
// The flush puts the responder's subscription on the server first, and the
// drain answers what the early one already has: a question that arrives in
// between is answered by one of the two, not lost (a test saw it lost, and
// two nodes then served one worker id).
func (n *Node) stopStarting(ctx context.Context) error {
	if n.early == nil {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("answer %s: %w", wire.StatusSubject, err)
	}
	return n.early.Drain()
}
