package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestSlowMembershipServer: of two servers of a cluster, the node "far"
// has its main connection on one and its queue-group memberships on the
// other, whose link then slows to 1.5 s each way (its share of each
// queue group misses every client's deadline; the pings do not give such
// a link up). The node's round trip is its worst connection's: within a
// measurement and the limit (5.5 s) it says it is not ready for segment
// because of the round trip; within two measurements it leaves the queue
// groups while "near" serves, which closes the slow connections, and joins
// again on connections to its main connection's server, so that within
// 40 s of the slowdown every segment request is answered within a 1 s
// deadline, by both nodes.
func TestSlowMembershipServer(t *testing.T) {
	srv := natstest.RunCluster(t, 2)
	p := natstest.Proxy(t, srv[0].ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	start := func(name, url string) *Node { t.Helper(); return startAt(ctx, t, name, url) }
	near := start("near", srv[1].ClientURL())
	far := start("far", "nats://"+p.Listen)
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		waitUntil(t, what, within, ok, func() string {
			_, why := far.ReadySubject(wire.SubjectSegment)
			return fmt.Sprintf("far: round trip %v, segment in %v, ready: %v", far.conn.RTT(), far.serve.resp.SegmentService() != nil, why)
		})
	}
	segReady := func(n *Node) bool { _, err := n.ReadySubject(wire.SubjectSegment); return err == nil }
	waitFor("both nodes ready in the segment group", time.Minute, func() bool {
		return near.serve.resp.SegmentService() != nil && far.serve.resp.SegmentService() != nil && segReady(near) && segReady(far)
	})

	// far's main connection moves off the proxy: its server drops it, and
	// it reconnects to a server it learnt of from the cluster; the
	// memberships stay behind the proxy.
	cids := func(name string) []uint64 {
		cz, err := srv[0].Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, ci := range cz.Conns {
			if ci.Name == name {
				out = append(out, ci.Cid)
			}
		}
		return out
	}
	segConn := cids("far segment")
	if len(segConn) != 1 || len(cids("far")) != 1 {
		t.Fatalf("far's connections on the proxied server: main %v, segment %v", cids("far"), segConn)
	}
	if err := srv[0].DisconnectClientByID(cids("far")[0]); err != nil {
		t.Fatal(err)
	}
	host := func(u string) string { pu, _ := url.Parse(u); return pu.Host }
	waitFor("far's main connection off the proxy", 20*time.Second, func() bool {
		return far.conn.NC().IsConnected() && host(far.conn.NC().ConnectedUrl()) != p.Listen
	})
	if got := cids("far segment"); len(got) != 1 || got[0] != segConn[0] {
		t.Fatalf("far's segment connection moved too: %v, was %v", got, segConn)
	}
	waitFor("far ready again", 20*time.Second, func() bool { return segReady(far) && far.conn.RTT() < 500*time.Millisecond })

	natstest.BothWays(t, p, "latency", "latency", 1500)
	slowed := time.Now()
	waitFor("far not ready for segment", 15*time.Second, func() bool { return !segReady(far) })
	_, why := far.ReadySubject(wire.SubjectSegment)
	if why == nil || !strings.Contains(why.Error(), "NATS round trip") {
		t.Errorf("far not ready for segment for another reason: %v", why)
	}
	var seg wire.SubjectStatus
	for _, s := range far.status().Subjects {
		if s.Subject == wire.SubjectSegment {
			seg = s
		}
	}
	if seg.Ready || !strings.Contains(strings.Join(seg.Problems, "; "), "above --max-nats-rtt") {
		t.Errorf("far's status of segment: ready %v, problems %q", seg.Ready, seg.Problems)
	}

	nc := natstest.Connect(t, srv[1].ClientURL())
	waitFor("every segment request answered in time, by both nodes", 40*time.Second-time.Since(slowed), func() bool {
		if far.serve.resp.SegmentService() == nil || !segReady(far) {
			return false
		}
		by := map[string]int{}
		for range 40 {
			reply, err := nc.RequestMsg(wire.NewRequest(wire.SegmentPrefix+wire.ProbeToken, 1, false), time.Second)
			if err == nil {
				err = wire.ReplyError(reply)
			}
			var pr wire.ProbeReply
			if err != nil || json.Unmarshal(reply.Data, &pr) != nil {
				return false
			}
			by[pr.Node]++
		}
		return by["far"] > 0 && by["near"] > 0
	})
	t.Logf("healed %v after the slowdown; far's round trip %v", time.Since(slowed).Round(100*time.Millisecond), far.conn.RTT())
	waitFor("the slow segment connection gone", 10*time.Second, func() bool {
		for _, cid := range cids("far segment") {
			if cid == segConn[0] {
				return false
			}
		}
		return true
	})
	if far.serve.resp.SegmentService() == nil || far.conn.RTT() > 500*time.Millisecond {
		t.Errorf("far: segment in %v, round trip %v", far.serve.resp.SegmentService() != nil, far.conn.RTT())
	}
}
