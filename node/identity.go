package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/wire"
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
	peers, err := ask.Status(ctx, n.nc, peerWindow)
	if err != nil {
		n.log.Warn("cannot ask the live nodes whether one is named like this node", "err", err)
		return nil
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
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if n.peersAt.IsZero() || time.Since(n.peersAt) > time.Second {
		n.peersSeen, n.peersErr = ask.Status(ctx, n.nc, peerWindow)
		n.peersAt = time.Now()
	}
	return n.peersSeen, n.peersErr
}

// peerLease is the snowflake.SourceConfig.PeerLease: the highest time
// lease a live node other than this process reports for worker among the
// worker ids it held and lost.
func (n *Node) peerLease(ctx context.Context, worker int64) time.Time {
	peers, err := n.peerStatus(ctx)
	if err != nil {
		return time.Time{}
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
		return time.Time{}
	}
	return time.Unix(0, high)
}

// peerHolder is the snowflake.SourceConfig.Holder: the live node other
// than this process that reports worker as its worker id, "" if none does
// (or none could be asked).
func (n *Node) peerHolder(ctx context.Context, worker int64) string {
	peers, err := n.peerStatus(ctx)
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their worker ids", "worker", worker, "err", err)
		return ""
	}
	for _, p := range peers {
		if !n.isSelf(p) && p.Snow != nil && p.Snow.Worker == worker {
			return fmt.Sprintf("live %s (worker registry %s, %s)", describe(p), p.Snow.Registry, p.Snow.State)
		}
	}
	return ""
}
