package natsconn_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/natsconn"
	"github.com/leafmq/leafmq/internal/natstest"
)

var discard = slog.New(slog.DiscardHandler)

// TestConnectWrongListen: a --nats-listen port that is no number is the
// caller's configuration error (no retry mends it), or ErrConfig.
func TestConnectWrongListen(t *testing.T) {
	mine := errors.New("mine")
	for _, tc := range []struct {
		name string
		sent error
		want error
	}{
		{"caller's sentinel", mine, mine},
		{"default", nil, natsconn.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natsconn.New(natsconn.Options{Name: "n", Listen: "127.0.0.1:x", DataDir: t.TempDir(), Logger: discard, ErrConfig: tc.sent})
			if err := c.Connect(); !errors.Is(err, tc.want) {
				t.Fatalf("Connect: %v, want %v", err, tc.want)
			}
			if c.Server() != nil || c.NC() != nil {
				t.Fatal("a server or connection after a wrong option")
			}
		})
	}
}

// TestConnectAgainKeepsEmbeddedServer: a Connect tried again (a node's
// start retries it while NATS does not answer) connects to the embedded
// server the first try started, not to a second one on the same store.
func TestConnectAgainKeepsEmbeddedServer(t *testing.T) {
	c := natsconn.New(natsconn.Options{Name: "n", Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: discard})
	t.Cleanup(c.Shutdown)
	if err := c.Connect(); err != nil {
		t.Fatal(err)
	}
	ns, url := c.Server(), c.ClientURL()
	if ns == nil || !c.NC().IsConnected() {
		t.Fatalf("server %v, connected %v", ns, c.NC().IsConnected())
	}
	c.NC().Close()
	if err := c.Connect(); err != nil {
		t.Fatal(err)
	}
	if c.Server() != ns || c.ClientURL() != url {
		t.Fatalf("second try: server %p at %s, want %p at %s", c.Server(), c.ClientURL(), ns, url)
	}
	other, err := c.Dial()
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !c.NC().IsClosed() {
		t.Fatal("not closed after Drain")
	}
}

// TestRTT: the round trip is 0 until measured, measured at once when the
// meter starts, and the meter's goroutine ends with StopRTT.
func TestRTT(t *testing.T) {
	s := natstest.RunServer(t)
	c := natsconn.New(natsconn.Options{Name: "n", URL: s.ClientURL(), Logger: discard})
	if _, err := c.Dial(); err == nil {
		t.Fatal("Dial before Connect")
	}
	if err := c.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.NC().Close() })
	if rtt := c.RTT(); rtt != 0 {
		t.Fatalf("round trip %v before measuring", rtt)
	}
	c.StartRTT()
	defer c.StopRTT()
	deadline := time.Now().Add(5 * time.Second)
	for c.RTT() <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("no round trip 5 s after the meter started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rtt := c.RTT(); rtt > time.Second {
		t.Fatalf("round trip %v to a server in this process", rtt)
	}
}

// TestDialMember: a membership's connection is named after the node and
// its queue group, and there is none before Connect.
func TestDialMember(t *testing.T) {
	s := natstest.RunServer(t)
	c := natsconn.New(natsconn.Options{Name: "n", URL: s.ClientURL(), Logger: discard})
	if _, err := c.DialMember("segment"); err == nil {
		t.Fatal("DialMember before Connect")
	}
	if err := c.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	nc, err := c.DialMember("segment")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.Opts.Name != "n segment" || !nc.Opts.RetryOnFailedConnect {
		t.Fatalf("name %q, retry on failed connect %v: want \"n segment\", true", nc.Opts.Name, nc.Opts.RetryOnFailedConnect)
	}
}
