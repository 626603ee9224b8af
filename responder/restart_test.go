package responder_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/wire"
)

// TestSnowflakeRejoinAfterServerRestart joins and leaves the snowflake
// queue group while the server is down, as a node does when its worker
// claim lapses during a NATS restart and is confirmed again. Once the
// server is back, it must hold exactly one subscription per snowflake
// subject for the node, and answer every request.
func TestSnowflakeRejoinAfterServerRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		up, down   []bool // SetSnowflake calls while the server is up, then down
		afterStart []bool // and once it is back
	}{
		{name: "leave while down", up: []bool{true}, down: []bool{false}, afterStart: []bool{true}},
		{name: "leave and join while down", up: []bool{true}, down: []bool{false, true}},
		{name: "join while down", down: []bool{true}},
		{name: "join twice across the restart", up: []bool{true}, down: []bool{true}, afterStart: []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := natstest.RunServer(t, func(o *server.Options) { o.StoreDir = dir })
			url, port := s.ClientURL(), s.Addr().(*net.TCPAddr).Port
			reconnected := make(chan struct{}, 1)
			nc := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
				nats.ReconnectHandler(func(*nats.Conn) {
					select {
					case reconnected <- struct{}{}:
					default:
					}
				}))
			r := startSnowflake(t, nc, responder.Config{Node: "sf", Snowflake: newRing(t)})
			set := func(calls []bool) {
				t.Helper()
				for _, on := range calls {
					if err := r.SetSnowflake(on); err != nil {
						t.Fatalf("SetSnowflake(%v): %v", on, err)
					}
				}
			}
			set(tc.up)
			s.Shutdown()
			s.WaitForShutdown()
			testenv.Eventually(t, "disconnected", 5*time.Second, func() bool { return !nc.IsConnected() })
			set(tc.down)
			s = natstest.RunServer(t, func(o *server.Options) { o.StoreDir, o.Port = dir, port })
			select {
			case <-reconnected:
			case <-time.After(10 * time.Second):
				t.Fatal("no reconnect within 10 s")
			}
			set(tc.afterStart)

			for _, subj := range []string{wire.SnowflakeSubject, wire.SnowflakePrefix + "k"} {
				testenv.Eventually(t, "one subscription on "+subj, 5*time.Second, func() bool {
					sz, err := s.Subsz(&server.SubszOptions{Subscriptions: true, Test: subj})
					return err == nil && sz.Total == 1
				})
			}
			// Settle: extra subscriptions would show up in Subsz too, but
			// give a late one the time to arrive before counting again.
			time.Sleep(200 * time.Millisecond)
			for _, subj := range []string{wire.SnowflakeSubject, wire.SnowflakePrefix + "k"} {
				sz, err := s.Subsz(&server.SubszOptions{Subscriptions: true, Test: subj})
				if err != nil {
					t.Fatal(err)
				}
				if sz.Total != 1 {
					t.Errorf("%d subscriptions match %s, want 1", sz.Total, subj)
				}
			}
			asker := natstest.Connect(t, url)
			lost := 0
			for range 40 {
				if _, err := asker.Request(wire.SnowflakeSubject, nil, time.Second); err != nil {
					if !errors.Is(err, nats.ErrTimeout) {
						t.Fatal(err)
					}
					lost++
				}
			}
			if lost > 0 {
				t.Errorf("%d of 40 snowflake requests unanswered", lost)
			}
		})
	}
}
