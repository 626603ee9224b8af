package natstest

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/freeport"
)

const (
	readyTimeout   = 10 * time.Second
	clusterTimeout = 30 * time.Second
	pollInterval   = 20 * time.Millisecond
)

// RunServer starts an embedded nats-server on 127.0.0.1 with a kernel-picked
// client port and JetStream enabled (store under t.TempDir()), applies opts
// to its Options before it starts, and waits until it accepts connections.
// The server is shut down, and waited for, at clean-up.
func RunServer(t testing.TB, opts ...func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	for _, f := range opts {
		f(o)
	}
	return start(t, o)
}

func start(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	errs := &errorLog{}
	s.SetLogger(errs, false, false)
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		t.Fatalf("natstest: server %q not ready within %v; its errors: %s", o.ServerName, readyTimeout, errs)
	}
	return s
}

// errorLog keeps a server's first errors (a port it could not bind), so a
// server that never becomes ready says why; it drops everything else.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) keep(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.msgs) < 10 {
		l.msgs = append(l.msgs, fmt.Sprintf(format, v...))
	}
}

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.msgs) == 0 {
		return "none"
	}
	return strings.Join(l.msgs, "; ")
}

func (l *errorLog) Fatalf(format string, v ...any) { l.keep(format, v...) }
func (l *errorLog) Errorf(format string, v ...any) { l.keep(format, v...) }
func (*errorLog) Noticef(string, ...any)           {}
func (*errorLog) Warnf(string, ...any)             {}
func (*errorLog) Debugf(string, ...any)            {}
func (*errorLog) Tracef(string, ...any)            {}

// RunCluster starts n (>= 1) routed servers named "n0".."n<n-1>" in cluster
// "natstest", each with JetStream and its own store directory, and waits
// (bounded by 30 s) until every server routes to all others and sees a
// JetStream meta leader. Servers are shut down at clean-up.
//
// Tests may shut one down (s.Shutdown()) to simulate node loss; clean-up
// copes with that.
func RunCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	c := NewCluster(t, n)
	for i := range n {
		c.Start(i)
	}
	c.Wait()
	return c.Servers
}

// Cluster is a cluster of embedded nats-servers configured by NewCluster
// and started one by one, for tests of what clients see while a cluster
// forms (no JetStream meta leader before a quorum is up).
type Cluster struct {
	t       testing.TB
	opts    []*server.Options
	Servers []*server.Server // nil until started
}

// NewCluster configures n servers as RunCluster does and starts none.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: RunCluster(%d): need at least one server", n)
	}
	ports := freePorts(t, 2*n)
	routes := make([]*url.URL, n)
	for i := range n {
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
	}
	base := t.TempDir()
	c := &Cluster{t: t, opts: make([]*server.Options, n), Servers: make([]*server.Server, n)}
	for i := range n {
		c.opts[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       ports[n+i], // fixed, so ClientURLs is known before start
			JetStream:  true,
			StoreDir:   filepath.Join(base, fmt.Sprintf("n%d", i)),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{
				Name: "natstest",
				Host: "127.0.0.1",
				Port: ports[i],
			},
			Routes: routes,
		}
	}
	return c
}

// Start starts server i and waits until it accepts connections.
func (c *Cluster) Start(i int) *server.Server {
	c.t.Helper()
	c.Servers[i] = start(c.t, c.opts[i])
	return c.Servers[i]
}

// URL is the client URL of server i, started or not.
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("nats://%s:%d", c.opts[i].Host, c.opts[i].Port)
}

// Wait waits (bounded by 30 s) until every server routes to all others and
// the cluster has a JetStream meta leader; all must have been started.
func (c *Cluster) Wait() {
	c.t.Helper()
	waitCluster(c.t, c.Servers)
}

// waitCluster polls until every server routes to all others, exactly one
// is the JetStream meta leader, every server is current with the meta group,
// and the leader sees all n servers as JetStream peers (an R=n stream can be
// placed).
func waitCluster(t testing.TB, servers []*server.Server) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for !clusterReady(servers) {
		if time.Now().After(deadline) {
			t.Fatalf("natstest: cluster of %d not formed within %v", len(servers), clusterTimeout)
		}
		time.Sleep(pollInterval)
	}
}

func clusterReady(servers []*server.Server) bool {
	var leader *server.Server
	for _, s := range servers {
		if s.NumRoutes() < len(servers)-1 || !s.JetStreamIsCurrent() {
			return false
		}
		if len(servers) > 1 && !s.JetStreamIsClustered() {
			return false
		}
		if s.JetStreamIsLeader() {
			if leader != nil {
				return false
			}
			leader = s
		}
	}
	if len(servers) == 1 {
		return true
	}
	return leader != nil && len(leader.JetStreamClusterPeers()) == len(servers)
}

// freePorts returns n ports from freeport.Take: servers told each other's
// ports before they start must not lose one to another test meanwhile.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Take(n)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return ports
}

// Connect connects to url (a comma-separated list is fine) with opts and
// closes the connection at clean-up.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ClientURLs returns the client URLs of servers joined by commas, suitable
// for nats.Connect.
func ClientURLs(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}
