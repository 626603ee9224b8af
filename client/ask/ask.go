package ask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// StatusWindow is how long to gather the live nodes' status (Status) when
// the asking node's round trip to NATS is rtt: a fast node answers within
// 300 ms, and the question and its answers cross the asker's own link
// twice, so a slow node still hears its fast peers (at most 5 s).
func StatusWindow(rtt time.Duration) time.Duration {
	return min(300*time.Millisecond+2*rtt, 5*time.Second)
}

// Status asks every node of scope on nc for its status (scope.Status(),
// leaf.admin.status for no region: every node of every region answers it)
// and gathers the answers that arrive within window, sorted by node name.
func Status(ctx context.Context, nc *nats.Conn, scope wire.Scope, window time.Duration) ([]wire.NodeStatus, error) {
	var out []wire.NodeStatus
	err := Gather(ctx, nc, scope.Status(), window, func(msg *nats.Msg) {
		var st wire.NodeStatus
		if json.Unmarshal(msg.Data, &st) == nil && st.Node != "" {
			out = append(out, st)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// PeerClock is what the live nodes said of their clocks.
type PeerClock struct {
	Peers  []string      // names of the nodes that answered
	Offset time.Duration // average of (peer clock - our clock), each corrected by half its round trip
	Max    time.Duration // largest |offset| of a single peer
}

// PeerClocks asks every node of scope on nc for its time (scope.Time(),
// leaf.admin.time for no region) and gathers the answers that arrive
// within window. now is this node's clock. No answer is not an error (the
// first node has no peers): Peers is empty.
func PeerClocks(ctx context.Context, nc *nats.Conn, scope wire.Scope, window time.Duration, now func() time.Time) (PeerClock, error) {
	return PeerClocksBut(ctx, nc, scope, window, now, "")
}

// PeerClocksBut is PeerClocks without the answer of node self (a
// serving node answers leaf.admin.time itself).
func PeerClocksBut(ctx context.Context, nc *nats.Conn, scope wire.Scope, window time.Duration, now func() time.Time, self string) (PeerClock, error) {
	var c ClockSum
	sent := now()
	err := Gather(ctx, nc, scope.Time(), window, func(msg *nats.Msg) {
		c.Add(msg, sent, now(), self)
	})
	if err != nil {
		return PeerClock{}, fmt.Errorf("peer clocks: %w", err)
	}
	return c.PeerClock(), nil
}

// ClockSum gathers leaf.admin.time answers (wire.NodeTime) into a
// PeerClock, for gathers of other shapes than PeerClocks'. The zero value
// is ready; not safe for concurrent use (gathers call back one at a time).
type ClockSum struct {
	pc  PeerClock
	sum time.Duration
}

// Add counts the answer msg to a request sent at sent and received at
// got, each peer's offset corrected by half the round trip; answers of
// node self, and answers that are no NodeTime, are left out.
func (c *ClockSum) Add(msg *nats.Msg, sent, got time.Time, self string) {
	var t wire.NodeTime
	if json.Unmarshal(msg.Data, &t) != nil || t.UnixNano == 0 || (self != "" && t.Node == self) {
		return
	}
	mid := sent.Add(got.Sub(sent) / 2)
	off := time.Unix(0, t.UnixNano).Sub(mid)
	c.pc.Peers = append(c.pc.Peers, t.Node)
	c.sum += off
	c.pc.Max = max(c.pc.Max, off.Abs())
}

// PeerClock is what the answers added so far say.
func (c *ClockSum) PeerClock() PeerClock {
	pc := c.pc
	if len(pc.Peers) > 0 {
		pc.Offset = c.sum / time.Duration(len(pc.Peers))
	}
	return pc
}

// Gather sends an empty request on subject and calls each with every reply
// that arrives within window (or until ctx ends), one at a time: the
// scatter-gather of subjects every node answers (leaf.admin.time,
// leaf.admin.status, $SRV.*). No reply is not an error; a broken
// connection is.
func Gather(ctx context.Context, nc *nats.Conn, subject string, window time.Duration, each func(*nats.Msg)) error {
	_, err := GatherExpect(ctx, nc, subject, window, nil, nil, each)
	return err
}

// GatherExpect is Gather that, past window, goes on until every instance
// in expect has answered (instanceOf names a reply's instance) or ctx ends,
// and returns the instances that did not answer. expect is the live nodes
// the asker knows of (wire.MembersBucket): a slow answer is waited for,
// not taken for no node. Past window it asks again every resendEvery, for
// a node that was not subscribed when it first asked (one reconnecting
// after its server restarted); each instance's first answer only reaches
// each.
func GatherExpect(ctx context.Context, nc *nats.Conn, subject string, window time.Duration, expect map[string]bool,
	instanceOf func(*nats.Msg) string, each func(*nats.Msg)) ([]string, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	waiting := map[string]bool{}
	for inst := range expect {
		waiting[inst] = true
	}
	missing := func() []string {
		out := make([]string, 0, len(waiting))
		for inst := range waiting {
			out = append(out, inst)
		}
		sort.Strings(out)
		return out
	}
	windowEnd := time.Now().Add(window)
	resendAt := windowEnd.Add(resendEvery)
	seen := map[string]bool{}
	for {
		deadline := windowEnd
		if len(waiting) > 0 && !time.Now().Before(windowEnd) {
			deadline = resendAt
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && ctx.Err() == nil:
			if len(waiting) == 0 {
				return nil, nil // the window is over and nobody is missing
			}
			if !time.Now().Before(resendAt) {
				if err := nc.PublishRequest(subject, inbox, nil); err != nil {
					return nil, fmt.Errorf("publish %s: %w", subject, err)
				}
				resendAt = time.Now().Add(resendEvery)
			}
			continue // past the window: wait for the expected ones until ctx ends
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return missing(), nil // ctx is over
		case errors.Is(err, nats.ErrNoResponders):
			return missing(), nil // nobody answers
		case err != nil:
			return nil, fmt.Errorf("gather %s: %w", subject, err) // the connection closed…
		}
		if instanceOf != nil {
			inst := instanceOf(msg)
			if inst != "" && seen[inst] {
				continue // an answer to a question asked again
			}
			seen[inst] = inst != ""
			delete(waiting, inst)
		}
		each(msg)
	}
}

// resendEvery is how often GatherExpect asks again past its window while
// an expected instance has not answered.
const resendEvery = time.Second

// Floors asks every live node of scope on nc for its floor of tag
// (scope.FloorPrefix()+tag, leaf.admin.floor.<tag> for no region) within
// window and returns the highest and the node that holds it ("" when no
// node has one). A region's floors count its own local numbers: another
// region's are not asked.
func Floors(ctx context.Context, nc *nats.Conn, scope wire.Scope, tag wire.Tag, window time.Duration) (int64, string, error) {
	var high int64
	var who string
	err := Gather(ctx, nc, scope.FloorPrefix()+tag.String(), window, func(msg *nats.Msg) {
		var f wire.NodeFloor
		if json.Unmarshal(msg.Data, &f) == nil && f.Tag == tag.String() && f.Floor > high {
			high, who = f.Floor, f.Node
		}
	})
	if err != nil {
		return 0, "", fmt.Errorf("floors of %q: %w", tag, err)
	}
	return high, who, nil
}
