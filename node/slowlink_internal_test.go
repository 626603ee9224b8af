package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// TestSnowflakeServesOverSlowLink: a serving node whose link to NATS
// slows to 0.4 s each way, so a round trip takes 0.8 s and a time-lease
// renewal (a read of the lease key from the stream leader, then its
// compare-and-swap) 1.6 s: more than half of the 3 s lease ahead, which was
// all a renewal got. Within 30 s of the slowdown the node serves snowflake
// again (if it stopped), and then answers every request: ids, or at once
// a 503 or no responders.
// (A node that starts 0.8 s from NATS does not get that far: opening the
// monotonic tags' bucket is bounded by 3 s.)
func TestSnowflakeServesOverSlowLink(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := Start(ctx, config.Config{Name: "slow", NATS: config.NATSConfig{URL: "nats://" + p.Listen}, DataDir: t.TempDir(),
		HTTP: config.HTTPConfig{Addr: "127.0.0.1:0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	serving := func() bool { return n.Snowflake().State() == snowflake.StateServing && n.SnowflakeJoined() }
	for !serving() {
		if ctx.Err() != nil {
			t.Fatalf("snowflake %v a minute after the start", n.Snowflake().State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	natstest.BothWays(t, p, "latency", "latency", 400)
	slowed := time.Now()
	// Past a few renewals on the slow link.
	time.Sleep(10 * time.Second)
	for !serving() {
		if time.Since(slowed) > 30*time.Second {
			_, why := n.ReadySubject(wire.SubjectSnowflake)
			t.Fatalf("snowflake %v 30 s after the link slowed to 0.8 s round trips (readiness: %v)", n.Snowflake().State(), why)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("serving %v after the slowdown; lease up to %v ahead", time.Since(slowed).Round(time.Millisecond),
		time.Until(n.Snowflake().Leased()).Round(time.Millisecond))
	// 100 requests, ten at a time (each takes a round trip to the node).
	nc := natstest.Connect(t, s.ClientURL())
	var mu sync.Mutex
	var wg sync.WaitGroup
	ids, fails := 0, map[string]int{}
	for range 10 {
		wg.Go(func() {
			for range 10 {
				reply, err := nc.RequestMsg(wire.NewRequest(wire.SnowflakeSubject, 1, false), 10*time.Second)
				if err == nil {
					err = wire.ReplyError(reply)
				}
				mu.Lock()
				switch {
				case err == nil:
					ids++
				case errors.Is(err, nats.ErrNoResponders):
					fails["no responders"]++
				default:
					fails[err.Error()]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Over a 0.8 s round trip on a loaded machine the claim can still be
	// lost now and then (the node then says so and leaves the group, and
	// --max-nats-rtt reports it not ready): what must not happen is a
	// request left unanswered, or a node that never serves.
	silent := 0
	for why, k := range fails {
		if why != "no responders" && !strings.Contains(why, "503") {
			silent += k
		}
	}
	if ids == 0 || silent > 0 {
		t.Errorf("%d of 100 requests got ids 0.4 s from NATS; failures: %v", ids, fails)
	} else {
		t.Logf("%d of 100 requests got ids; failures: %v", ids, fails)
	}
}

// TestSlowNATSLinkNotReady: a node whose link to NATS slows to 0.6 s each
// way (a 1.2 s round trip, so every answer it gives misses a client's 1 s
// deadline) says so: within 20 s /readyz is 503 and /readyz/segment,
// /readyz/snowflake name the round trip above --max-nats-rtt, and
// leafmq_nats_rtt_seconds and leaf.admin.status show it. Within 20 s of
// the link's recovery it is ready again.
func TestSlowNATSLinkNotReady(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n, err := Start(ctx, config.Config{Name: "far", NATS: config.NATSConfig{URL: "nats://" + p.Listen}, DataDir: t.TempDir(),
		HTTP: config.HTTPConfig{Addr: "127.0.0.1:0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// waitFor polls until ok, or fails naming what it waited for.
	waitFor := func(what string, within time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > within {
				_, why := n.ReadySubject(wire.SubjectSegment)
				t.Fatalf("not %s after %v (segment: %v; round trip %v)", what, within, why, n.conn.RTT())
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}
	segReady := func() bool { _, err := n.ReadySubject(wire.SubjectSegment); return err == nil }
	waitFor("ready at the start", time.Minute, func() bool { return n.Ready() == nil })
	if rtt := n.conn.RTT(); rtt <= 0 || rtt > 500*time.Millisecond {
		t.Fatalf("round trip %v over a fast link", rtt)
	}

	natstest.BothWays(t, p, "latency", "latency", 600)
	const reason = "above --max-nats-rtt 500ms"
	took := waitFor("unready for segment", 20*time.Second, func() bool { return !segReady() })
	_, why := n.ReadySubject(wire.SubjectSegment)
	if why == nil || !strings.Contains(why.Error(), "NATS round trip") || !strings.Contains(why.Error(), reason) {
		t.Fatalf("segment not ready for another reason: %v", why)
	}
	t.Logf("unready %v after the slowdown: %v", took.Round(100*time.Millisecond), why)
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, reason) {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, body := get("/readyz/segment"); code != http.StatusServiceUnavailable || !strings.Contains(body, reason) {
		t.Errorf("/readyz/segment: %d %q", code, body)
	}
	if _, why := n.ReadySubject(wire.SubjectSnowflake); why == nil || !strings.Contains(why.Error(), reason) {
		t.Errorf("snowflake: %v", why)
	}
	if st := n.status(); st.Ready || time.Duration(st.NATSRTT) <= 500*time.Millisecond {
		t.Errorf("status: ready %v, round trip %v", st.Ready, time.Duration(st.NATSRTT))
	}
	_, body := get("/metrics")
	if !strings.Contains(body, "\nleafmq_nats_rtt_seconds ") {
		t.Errorf("no leafmq_nats_rtt_seconds in /metrics")
	}

	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.Toxics.RemoveToxic(ctx, "latency-"+stream); err != nil {
			t.Fatal(err)
		}
	}
	took = waitFor("ready again for segment", 20*time.Second, segReady)
	t.Logf("ready %v after the link recovered", took.Round(100*time.Millisecond))
	if code, body := get("/readyz/segment"); code != http.StatusOK {
		t.Errorf("/readyz/segment after the recovery: %d %q", code, body)
	}
}

// TestSlowNodeLeavesQueueGroups: of two nodes, the one whose link to NATS
// slows to 0.4 s each way (a 0.8 s round trip, above --max-nats-rtt)
// leaves the segment and snowflake queue groups once it measured the
// round trip and heard that the other node is not slow and serves both
// (snowflake while its worker serves: it yields, see
// TestSnowflakeServesOverSlowLink for a worker over such a link): then
// every request through the queue groups is answered by the fast node
// within a client's 1 s deadline, and the slow node says it serves
// neither subject. Once the link is fast again it joins both again; slow
// again, and alone, it joins too (answering late beats not answering).
func TestSlowNodeLeavesQueueGroups(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	start := func(name, url string) *Node { t.Helper(); return startAt(ctx, t, name, url) }
	near := start("near", s.ClientURL())
	far := start("far", "nats://"+p.Listen)
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		waitUntil(t, what, within, ok, func() string {
			return fmt.Sprintf("far: round trip %v, segment in %v, snowflake in %v",
				far.conn.RTT(), far.serve.resp.SegmentService() != nil, far.SnowflakeJoined())
		})
	}
	in := func(n *Node) bool { return n.serve.resp.SegmentService() != nil && n.SnowflakeJoined() }
	out := func(n *Node) bool { return n.serve.resp.SegmentService() == nil && !n.SnowflakeJoined() }
	waitFor("both nodes in both groups", time.Minute, func() bool { return in(near) && in(far) })

	natstest.BothWays(t, p, "latency", "latency", 400)
	waitFor("the slow node out of both groups", 40*time.Second, func() bool { return out(far) })
	waitFor("the slow node's snowflake serving, out of its group", 40*time.Second, func() bool {
		return far.Snowflake().State() == snowflake.StateServing && !far.SnowflakeJoined()
	})
	for _, sub := range far.status().Subjects {
		if sub.Subject != wire.SubjectSegment && sub.Subject != wire.SubjectSnowflake {
			continue
		}
		if sub.Serving || sub.Ready || !strings.Contains(strings.Join(sub.Problems, "; "), "out of the queue group") {
			t.Errorf("the slow node out of the %s queue group says: serving %v, ready %v, problems %q", sub.Subject, sub.Serving, sub.Ready, sub.Problems)
		}
	}

	// Probes name the node that answered; ids show the deadline is kept.
	nc := natstest.Connect(t, s.ClientURL())
	for i := range 20 {
		for _, subject := range []string{wire.SegmentPrefix + wire.ProbeToken, wire.SnowflakePrefix + wire.ProbeToken, wire.SnowflakeSubject} {
			begin := time.Now()
			reply, err := nc.RequestMsg(wire.NewRequest(subject, 1, false), time.Second)
			if err == nil {
				err = wire.ReplyError(reply)
			}
			if err != nil {
				t.Fatalf("request %d on %s: %v after %v", i, subject, err, time.Since(begin))
			}
			if subject == wire.SnowflakeSubject {
				continue
			}
			var pr wire.ProbeReply
			if err := json.Unmarshal(reply.Data, &pr); err != nil || pr.Node != "near" {
				t.Fatalf("request %d on %s answered by %q (%v), want near", i, subject, pr.Node, err)
			}
		}
	}

	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.Toxics.RemoveToxic(ctx, "latency-"+stream); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("the node in both groups again once its link is fast", 30*time.Second, func() bool { return in(far) })

	natstest.BothWays(t, p, "latency", "latency", 400)
	waitFor("the slow node out again", 40*time.Second, func() bool { return far.serve.resp.SegmentService() == nil })
	if err := near.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor("the slow node in the segment group once alone", 30*time.Second, func() bool { return far.serve.resp.SegmentService() != nil })
}

// TestSlowMonoLeaderYields: the leader of a monotonic tag whose link to
// NATS slows to 0.4 s each way hands the tag to the fast node. Its
// question to the live nodes crosses its own slow link twice, so it waits
// for their answers as long as its round trips take (ask.StatusWindow):
// with a fixed 300 ms it heard no one, kept the tag, and every request of
// the tag timed out while the fast node was ready.
func TestSlowMonoLeaderYields(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	start := func(name, url string) *Node { t.Helper(); return startAt(ctx, t, name, url) }
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		waitUntil(t, what, within, ok, func() string { return "" })
	}
	far := start("far", "nats://"+p.Listen)
	nc := natstest.Connect(t, s.ClientURL())
	body, _ := json.Marshal(wire.AdminRequest{Tag: "ticks", Step: 50, Mode: "mono"})
	if reply, err := nc.Request(wire.TagCreateSubject, body, 10*time.Second); err != nil || wire.ReplyError(reply) != nil {
		t.Fatalf("create: %v %v", err, wire.ReplyError(reply))
	}
	leads := func(n *Node) bool { return len(n.MonoLeading()) == 1 }
	waitFor("far leading the tag", time.Minute, func() bool { return leads(far) })
	near := start("near", s.ClientURL())

	natstest.BothWays(t, p, "latency", "latency", 400)
	waitFor("the tag led by the fast node", 45*time.Second, func() bool { return leads(near) && !leads(far) })
	ask := func() error {
		reply, err := nc.RequestMsg(wire.NewRequest(wire.MonoPrefix+"ticks", 1, false), time.Second)
		if err == nil {
			err = wire.ReplyError(reply)
		}
		return err
	}
	// The hand-over itself (no responder, a 503) is asked again, as the
	// client does; then every request is answered within 1 s.
	waitFor("the fast leader answering", 5*time.Second, func() bool { return ask() == nil })
	for i := range 20 {
		if err := ask(); err != nil {
			t.Fatalf("request %d of the monotonic tag: %v", i, err)
		}
	}
}

// startAt starts the node name on the NATS at url, with a data directory
// of its own and HTTP on a free port, closed at the test's end.
func startAt(ctx context.Context, t *testing.T, name, url string) *Node {
	t.Helper()
	n, err := Start(ctx, config.Config{Name: name, NATS: config.NATSConfig{URL: url}, DataDir: t.TempDir(),
		HTTP: config.HTTPConfig{Addr: "127.0.0.1:0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

// waitUntil polls ok until it holds, failing the test after within with
// what and detail's account of the nodes, and logs how long it took.
func waitUntil(t *testing.T, what string, within time.Duration, ok func() bool, detail func() string) {
	t.Helper()
	begin := time.Now()
	for !ok() {
		if time.Since(begin) > within {
			t.Fatalf("not %s after %v (%s)", what, within, detail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s after %v", what, time.Since(begin).Round(100*time.Millisecond))
}
