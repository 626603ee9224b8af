package natsconn

import (
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
)

// TestConnectsFarFromNATS: a node 0.8 s (each way) from its NATS server
// connects. The handshake takes three trips one way, 2.4 s here: with
// nats.go's default 2 s timeout it would never connect, and a node that
// lost its server would never reconnect.
func TestConnectsFarFromNATS(t *testing.T) {
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	natstest.BothWays(t, p, "latency", "latency", 800)
	c := New(Options{Name: "far", URL: "nats://" + p.Listen, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Connect(); err != nil {
		t.Fatalf("a node 0.8 s from NATS: %v", err)
	}
	c.NC().Close()
}

// TestBlackholedLinkIsNoticed: a link to NATS that swallows every byte
// (a partition that resets nothing) is noticed within pingEvery times
// pingsOut and a little: the connection is then down, so readiness says so
// and the client reconnects (to another server of a cluster). With
// nats.go's default pings (2 minutes, two out) the node stayed ready and
// subscribed for minutes while no request reached it.
func TestBlackholedLinkIsNoticed(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	p := natstest.Proxy(t, s.ClientURL())
	c := New(Options{Name: "cut", URL: "nats://" + p.Listen, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Connect(); err != nil {
		t.Fatal(err)
	}
	defer c.NC().Close()
	natstest.BothWays(t, p, "timeout", "timeout", 0)
	cut := time.Now()
	within := pingEvery*time.Duration(pingsOut+1) + 5*time.Second
	for c.NC().IsConnected() {
		if time.Since(cut) > within {
			t.Fatalf("still connected %v after the link went silent", time.Since(cut).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("noticed after %v", time.Since(cut).Round(100*time.Millisecond))
}

// meterOf is a meter with measurements last and prev, and one in flight
// for pending (0: none), of no connection.
func meterOf(last, prev, pending time.Duration) *rttMeter {
	m := &rttMeter{}
	st := &rttState{last: last, prev: prev}
	if pending > 0 {
		st.since = time.Now().Add(-pending)
	}
	m.state.Store(st)
	return m
}

// SteadyRTT is slow only when the last two measurements were: one slow
// moment (the machine stalled) does not make the node step aside. A
// measurement in flight counts as the newer of two once it has taken
// longer than the last: a connection that turned silent after one slow
// measurement is steady slow before its measurement times out.
func TestSteadyRTT(t *testing.T) {
	c := &Conn{}
	if got, rtt := c.SteadyRTT(), c.RTT(); got != 0 || rtt != 0 {
		t.Fatalf("before measuring: %v, %v", got, rtt)
	}
	const ms = time.Duration(0) // none under way
	for _, tc := range []struct {
		name                string
		last, prev, pending time.Duration
		steady, rtt         time.Duration
	}{
		{"one slow measurement", 900 * time.Millisecond, 2 * time.Millisecond, ms, 2 * time.Millisecond, 900 * time.Millisecond},
		{"two slow measurements", 900 * time.Millisecond, 800 * time.Millisecond, ms, 800 * time.Millisecond, 900 * time.Millisecond},
		{"slow, and a fast one under way", 900 * time.Millisecond, 800 * time.Millisecond, time.Millisecond, 800 * time.Millisecond, 900 * time.Millisecond},
		{"one fast after slow ones", 2 * time.Millisecond, 800 * time.Millisecond, ms, 2 * time.Millisecond, 2 * time.Millisecond},
		{"one slow, the next under way as long", 900 * time.Millisecond, 2 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond, 900 * time.Millisecond},
		{"one slow, the next under way longer", 900 * time.Millisecond, 2 * time.Millisecond, 2 * time.Second, 900 * time.Millisecond, 2 * time.Second},
		{"fast, the next under way long", 2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Second, 2 * time.Millisecond, 2 * time.Second},
	} {
		c.rtt.all.Store(&[]*rttMeter{meterOf(tc.last, tc.prev, tc.pending)})
		steady, rtt := c.SteadyRTT(), c.RTT()
		// The one under way goes on while it is read.
		if steady < tc.steady || steady > tc.steady+100*time.Millisecond || rtt < tc.rtt || rtt > tc.rtt+100*time.Millisecond {
			t.Errorf("%s: SteadyRTT %v, RTT %v; want %v, %v", tc.name, steady, rtt, tc.steady, tc.rtt)
		}
	}
}

// TestRTTOfWorstConnection: the node's round trip is that of its slowest
// connection, NC's or a membership's, each steady on its own: one
// membership connection slow for two measurements makes the node steady
// slow, two connections slow once each (one stall seen by both) do not.
func TestRTTOfWorstConnection(t *testing.T) {
	c := &Conn{}
	main := meterOf(3*time.Millisecond, 2*time.Millisecond, 0)
	c.rtt.all.Store(&[]*rttMeter{main, meterOf(900*time.Millisecond, 800*time.Millisecond, 0), meterOf(time.Millisecond, time.Millisecond, 0)})
	if rtt, steady := c.RTT(), c.SteadyRTT(); rtt != 900*time.Millisecond || steady != 800*time.Millisecond {
		t.Errorf("a membership slow twice: RTT %v, SteadyRTT %v; want 900ms, 800ms", rtt, steady)
	}
	c.rtt.all.Store(&[]*rttMeter{meterOf(700*time.Millisecond, 2*time.Millisecond, 0), meterOf(900*time.Millisecond, time.Millisecond, 0)})
	if rtt, steady := c.RTT(), c.SteadyRTT(); rtt != 900*time.Millisecond || steady != 2*time.Millisecond {
		t.Errorf("each slow once: RTT %v, SteadyRTT %v; want 900ms, 2ms", rtt, steady)
	}
	c.rtt.all.Store(&[]*rttMeter{main, meterOf(0, 0, 3*time.Second)})
	if rtt := c.RTT(); rtt < 3*time.Second {
		t.Errorf("a membership silent for 3 s: RTT %v", rtt)
	}
}

// TestMemberOnSlowServer: of two servers of a cluster, a membership
// connection on one whose link turns slow (1 s each way), or silent, while
// NC is on the other makes the node's round trip slow, RTT within a
// measurement and SteadyRTT within two (a measurement not answered within
// its period counts as slow); closing it makes it fast again at once, and
// the next membership connection goes to NC's server.
func TestMemberOnSlowServer(t *testing.T) {
	defer func(was time.Duration) { rttEvery = was }(rttEvery)
	rttEvery = time.Second
	for _, link := range []struct{ kind, attr string }{{"latency", "latency"}, {"timeout", "timeout"}} {
		t.Run(link.kind, func(t *testing.T) { memberOnSlowServer(t, link.kind, link.attr) })
	}
}

func memberOnSlowServer(t *testing.T, kind, attr string) {
	srv := natstest.RunCluster(t, 2)
	p := natstest.Proxy(t, srv[0].ClientURL())
	c := New(Options{Name: "n", URL: "nats://" + p.Listen, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Connect(); err != nil {
		t.Fatal(err)
	}
	defer c.NC().Close()
	member, err := c.DialMember("segment")
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if err := member.Flush(); err != nil {
		t.Fatal(err)
	}
	// NC moves off the proxy: its server drops it, and it reconnects to
	// a server it learnt of from the cluster.
	cz, err := srv[0].Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range cz.Conns {
		if ci.Name == "n" {
			if err := srv[0].DisconnectClientByID(ci.Cid); err != nil {
				t.Fatal(err)
			}
		}
	}
	host := func(nc *nats.Conn) string { u, _ := url.Parse(nc.ConnectedUrl()); return u.Host }
	waitFor(t, "NC off the proxy", 10*time.Second, func() bool { return c.NC().IsConnected() && host(c.NC()) != p.Listen })
	if host(member) != p.Listen {
		t.Fatalf("the membership connection moved too, to %s", host(member))
	}
	c.StartRTT()
	defer c.StopRTT()
	waitFor(t, "both measured", 5*time.Second, func() bool { return len(*c.rtt.all.Load()) == 2 && c.SteadyRTT() > 0 })
	if rtt := c.RTT(); rtt > 500*time.Millisecond {
		t.Fatalf("round trip %v before the slowdown", rtt)
	}

	natstest.BothWays(t, p, kind, attr, map[string]int{"latency": 1000, "timeout": 0}[kind])
	slowed := time.Now()
	waitFor(t, "RTT slow", rttEvery+2*time.Second, func() bool { return c.RTT() > 500*time.Millisecond })
	t.Logf("RTT %v after %v", c.RTT(), time.Since(slowed).Round(10*time.Millisecond))
	waitFor(t, "SteadyRTT slow", 2*rttEvery+2*time.Second, func() bool { return c.SteadyRTT() > 500*time.Millisecond })
	t.Logf("SteadyRTT %v after %v", c.SteadyRTT(), time.Since(slowed).Round(10*time.Millisecond))

	member.Close()
	if rtt, steady := c.RTT(), c.SteadyRTT(); rtt > 500*time.Millisecond || steady > 500*time.Millisecond {
		t.Errorf("RTT %v, SteadyRTT %v once the slow connection closed", rtt, steady)
	}
	again, err := c.DialMember("segment")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	waitFor(t, "the new membership connected", 5*time.Second, again.IsConnected)
	if host(again) != host(c.NC()) {
		t.Errorf("the new membership connection went to %s, NC is on %s", host(again), host(c.NC()))
	}
	waitFor(t, "the closed one's meter gone", 3*rttEvery, func() bool { return len(*c.rtt.all.Load()) == 2 })
}

// waitFor polls ok until it holds, failing the test after within.
func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("not %s after %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
