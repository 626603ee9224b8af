package natsconn

import (
	"log/slog"
	"testing"
	"time"

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

// SteadyRTT is slow only when the last two measurements were: one slow
// moment (the machine stalled) does not make the node step aside.
func TestSteadyRTT(t *testing.T) {
	c := &Conn{}
	if got := c.SteadyRTT(); got != 0 {
		t.Fatalf("before measuring: %v", got)
	}
	m := &rttMeter{}
	c.rtt.Store(m)
	m.prev.Store(int64(2 * time.Millisecond))
	m.last.Store(int64(900 * time.Millisecond))
	if got := c.SteadyRTT(); got != 2*time.Millisecond {
		t.Errorf("one slow measurement: SteadyRTT %v, want 2ms", got)
	}
	m.prev.Store(int64(800 * time.Millisecond))
	if got := c.SteadyRTT(); got != 800*time.Millisecond {
		t.Errorf("two slow measurements: SteadyRTT %v, want 800ms", got)
	}
}
