package node_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/wire"
)

// natsDown is how long a restarted nats-server stays away: past the worker
// claim's TTL, so a node's claim lapses and is confirmed again once the
// server is back (it leaves the snowflake queue group and joins again).
const natsDown = 9 * time.Second

// TestNATSRestartEverySubjectAnswers stops a node's nats-server past the
// worker claim's TTL and starts it again, as a rolling upgrade of NATS
// does: within 20 s every subject the node serves (segment, monotonic,
// snowflake) answers again, and then answers every request (a node left
// with a stale subscription in a queue group loses the share NATS routes
// to it).
func TestNATSRestartEverySubjectAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// run starts NATS and the node under test; it returns the URL to
		// ask through and restart, which stops the node's server for d
		// and starts it again.
		run func(t *testing.T) (url string, restart func(d time.Duration))
	}{
		{"external server", func(t *testing.T) (string, func(time.Duration)) {
			dir := t.TempDir()
			s := natstest.RunServer(t, func(o *server.Options) { o.StoreDir = dir })
			url, port := s.ClientURL(), s.Addr().(*net.TCPAddr).Port
			startNode(t, config.Config{Name: "ext", NATS: config.NATSConfig{URL: url}, DataDir: t.TempDir()})
			return url, func(d time.Duration) {
				s.Shutdown()
				s.WaitForShutdown()
				time.Sleep(d)
				s = natstest.RunServer(t, func(o *server.Options) { o.StoreDir, o.Port = dir, port })
			}
		}},
		{"cluster", func(t *testing.T) (string, func(time.Duration)) {
			c := natstest.NewCluster(t, 3)
			for i := range 3 {
				c.Start(i)
			}
			c.Wait()
			startNode(t, config.Config{Name: "clu", NATS: config.NATSConfig{URL: c.URL(0)}, DataDir: t.TempDir(),
				Store: config.StoreConfig{KVReplicas: 3}})
			return natstest.ClientURLs(c.Servers), func(d time.Duration) {
				c.Servers[0].Shutdown()
				c.Servers[0].WaitForShutdown()
				time.Sleep(d)
				c.Start(0)
			}
		}},
		{"embedded server of another node", func(t *testing.T) (string, func(time.Duration)) {
			cfg := config.Config{Name: "host", NATS: config.NATSConfig{Listen: freeAddr(t)}, DataDir: t.TempDir()}
			host := startNode(t, cfg)
			url := host.ClientURL()
			startNode(t, config.Config{Name: "joined", NATS: config.NATSConfig{URL: url}, DataDir: t.TempDir()})
			return url, func(d time.Duration) {
				if err := host.Close(context.Background()); err != nil {
					t.Errorf("stop the host node: %v", err)
				}
				time.Sleep(d)
				host = startNode(t, cfg)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, restart := tc.run(t)
			nc := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "seg", Step: 100})
			admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "mono", Step: 50, Mode: "mono"})
			subjects := []string{wire.SegmentPrefix + "seg", wire.MonoPrefix + "mono", wire.SnowflakeSubject}
			answered := func(subject string, n int) (ok int, errs []string) {
				for range n {
					if err := askOnce(nc, subject); err != nil {
						errs = append(errs, err.Error())
						continue
					}
					ok++
				}
				return ok, errs
			}
			for _, s := range subjects {
				testenv.Eventually(t, s+" answers before the restart", 30*time.Second, func() bool { ok, _ := answered(s, 1); return ok == 1 })
			}
			restart(natsDown)
			back := time.Now()
			for _, s := range subjects {
				testenv.Eventually(t, s+" answers after the restart", 20*time.Second-time.Since(back), func() bool { ok, _ := answered(s, 1); return ok == 1 })
			}
			t.Logf("every subject answered %v after the server came back", time.Since(back).Round(time.Millisecond))
			for _, s := range subjects {
				if ok, errs := answered(s, 100); ok < 99 {
					t.Errorf("%s: %d of 100 answered after the restart: %s", s, ok, strings.Join(errs[:min(len(errs), 5)], "; "))
				}
			}
		})
	}
}

// askOnce asks subject for one id, with a deadline of its own (a lost
// request costs 2 s, not takeFrom's 5).
func askOnce(nc *nats.Conn, subject string) error {
	reply, err := nc.RequestMsg(wire.NewRequest(subject, 1, false), 2*time.Second)
	if err != nil {
		return err
	}
	return wire.ReplyError(reply)
}
