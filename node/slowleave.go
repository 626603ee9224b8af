package node

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/wire"
)

// A node whose round trip to NATS is above --max-nats-rtt answers late:
// past a client's deadline. It leaves the segment and snowflake queue
// groups while another live node that is not slow serves the subject, so
// that NATS sends every request to the nodes that answer in time, and
// joins again once its round trip is within --max-nats-rtt, or once no
// such node serves the subject (answering late beats not answering).
// Leaving takes a measured round trip above the limit (natsconn measures
// it every few seconds) and a fast peer's status; joining again a
// measured round trip within it: a round trip near the limit moves the
// node at most once a measurement. The peers are asked only while the
// node is slow, at most once every slowAskEvery a subject
// (TestSlowNodeLeavesQueueGroups).

// slowAskEvery is how often a slow node asks the live nodes whether one
// that is not slow serves a subject.
const slowAskEvery = 5 * time.Second

// slowNode reports whether the node's last measured round trip to NATS is
// above --max-nats-rtt.
func (n *Node) slowNode() bool {
	most := n.cfg.NATS.MaxRTT
	return most > 0 && n.conn.RTT() > most
}

// yieldSlow reports whether the node stays out of subject's queue group:
// it is slow and a live node that is not slow serves subject.
func (n *Node) yieldSlow(ctx context.Context, subject string) bool {
	y := &n.serve.yield
	if !n.slowNode() {
		y.mu.Lock()
		delete(y.at, subject)
		delete(y.out, subject)
		y.mu.Unlock()
		return false
	}
	y.mu.Lock()
	at, out := y.at[subject], y.out[subject]
	y.mu.Unlock()
	if !at.IsZero() && n.clock.Since(at) < slowAskEvery {
		return out
	}
	out = n.fastPeerServes(ctx, subject)
	y.mu.Lock()
	if y.at == nil {
		y.at, y.out = map[string]time.Time{}, map[string]bool{}
	}
	y.at[subject], y.out[subject] = n.clock.Now(), out
	y.mu.Unlock()
	return out
}

// fastPeerServes reports whether a live node other than this one serves
// subject and can answer it (wire.SubjectStatus Serving and Ready) with a
// round trip to NATS within --max-nats-rtt. It gathers the answers for a
// window that the slow round trip fits in, not waiting for every member
// (a read of the members' list takes several slow round trips): one such
// node is enough, and a node it misses, or a question that fails, keeps
// this node in the group.
func (n *Node) fastPeerServes(ctx context.Context, subject string) bool {
	window := min(statusWindow+2*n.conn.RTT(), 5*time.Second)
	ctx, cancel := context.WithTimeout(ctx, window+time.Second)
	defer cancel()
	live, err := ask.Status(ctx, n.conn.NC(), window)
	if err != nil {
		n.log.Debug("slow node: cannot ask the live nodes whether one that is not slow serves "+subject, "err", err)
		return false
	}
	most, self := n.cfg.NATS.MaxRTT, n.peers.Instance()
	for _, p := range live {
		if p.Instance == self || p.Starting || time.Duration(p.NATSRTT) > most {
			continue
		}
		for _, s := range p.Subjects {
			if s.Subject == subject && s.Serving && s.Ready {
				return true
			}
		}
	}
	return false
}

// statusWindow is how long a fast node's answer takes at most, beyond
// two round trips of this node's.
const statusWindow = 300 * time.Millisecond

// keepSegment starts the segmentKeeper; stopSegment stops it, the node
// staying where it is in the group (the responder's Stop leaves it).
func (n *Node) keepSegment(context.Context) error {
	if n.serve.resp == nil || n.cfg.NATS.MaxRTT <= 0 {
		return nil
	}
	k := &segmentKeeper{stop: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	n.serve.segKeep = k
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		t := n.clock.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C():
			}
			n.applySegment(k.ctx)
		}
	}()
	return nil
}

func (n *Node) stopSegment(context.Context) error {
	if k := n.serve.segKeep; k != nil {
		close(k.stop)
		k.cancel()
		k.wg.Wait()
	}
	return nil
}

// applySegment joins or leaves the segment queue group once.
func (n *Node) applySegment(ctx context.Context) {
	yield := n.yieldSlow(ctx, wire.SubjectSegment)
	was := n.serve.resp.SegmentService() != nil
	if err := n.serve.resp.SetSegment(!yield); err != nil {
		n.log.Warn("segment queue group change failed", "join", !yield, "err", err)
		return
	}
	switch {
	case yield && was:
		msg := "left the segment queue group: the round trip to NATS is above --max-nats-rtt and a live node that is not slow serves segment"
		n.log.Warn(msg, "rtt", n.conn.RTT())
		n.events.Emit(events.Event{Kind: events.QueueLeft, Level: events.Warn, Message: msg,
			Fields: map[string]any{"subject": wire.SubjectSegment}})
	case !yield && !was:
		n.log.Info("joined the segment queue group again", "rtt", n.conn.RTT())
		n.events.Emit(events.Event{Kind: events.QueueJoined, Message: "joined the segment queue group",
			Fields: map[string]any{"subject": wire.SubjectSegment}})
	}
}

// segmentConn is the connection of one membership of the segment queue
// group (responder.Config.SegmentConn), like snowflakeConn.
func (n *Node) segmentConn() (*nats.Conn, error) {
	return n.conn.Dial(nats.Name(n.cfg.Name+" segment"), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(nil), nats.ReconnectHandler(nil))
}
