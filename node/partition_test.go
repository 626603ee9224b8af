package node_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
)

// cutProxy forwards TCP connections to a target until it is cut: then
// it blackholes the link (blackhole) or drops it (close). Frozen, it
// holds every byte until thawed, as a SIGSTOPped process's kernel holds
// them: neither side loses its connection or a message.
type cutProxy struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	cut    bool
	thawed chan struct{} // closed while not frozen
	conns  []net.Conn
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to, thawed: make(chan struct{})}
	close(p.thawed)
	t.Cleanup(func() { p.close(); _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.carry(c)
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) carry(c net.Conn) {
	up, err := net.Dial("tcp", p.to)
	p.mu.Lock()
	if err != nil || p.cut {
		p.mu.Unlock()
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go p.copy(up, c)
	p.copy(c, up)
}

// copy carries src to dst until either closes; once the proxy is cut
// (a blackhole) it reads and drops what comes, and closes nothing.
func (p *cutProxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if err != nil {
			_ = dst.Close()
			return
		}
		p.mu.Lock()
		cut, thawed := p.cut, p.thawed
		p.mu.Unlock()
		if cut {
			continue
		}
		<-thawed // frozen: this side reads no more, and what it read waits
		if _, err := dst.Write(buf[:k]); err != nil {
			_ = src.Close()
			return
		}
	}
}

// blackhole drops every byte from now on, closing no connection (new
// ones are refused): neither side learns the link is gone until its
// pings go unanswered.
func (p *cutProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
}

// freeze holds every byte in both directions until thaw.
func (p *cutProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawed = make(chan struct{})
}

// thaw delivers what freeze held, and carries on.
func (p *cutProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// close drops every carried connection and refuses new ones.
func (p *cutProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	select {
	case <-p.thawed:
	default:
		close(p.thawed) // a frozen copy wakes to a closed connection
	}
}

// cuttableCluster starts three routed nats-servers with JetStream; every
// route to server 0 runs through the cutProxy it returns. Its blackhole
// cuts server 0 off: the other two find out only when its pings go
// unanswered, minutes later, and its clients stay connected to it. Its
// close, with server 0 shut down after it, is server 0 killed: no stepdown
// of its raft leaders reaches the other two.
func cuttableCluster(t *testing.T) (servers []*server.Server, to0 *cutProxy) {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range 6 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	clusterAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	// Server 0 solicits no other server and advertises its proxy: servers 1 and
	// 2 route to it through the proxy, and to each other directly once
	// server 0 has told them of each other.
	to0 = newCutProxy(t, clusterAddr(0))
	route := &url.URL{Scheme: "nats", Host: to0.addr()}
	routes := [][]*url.URL{{route}, {route}, {route}} // server 0's own: a route to itself is dropped, JetStream wants one
	advertise := []string{to0.addr(), "", ""}
	base := t.TempDir()
	servers = make([]*server.Server, 3)
	for i := range 3 {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("p%d", i),
			Host:       "127.0.0.1",
			Port:       ports[3+i],
			JetStream:  true,
			StoreDir:   filepath.Join(base, fmt.Sprintf("p%d", i)),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{
				Name:        "cuttable",
				Host:        "127.0.0.1",
				Port:        ports[i],
				NoAdvertise: true, // a client of server 0 learns no other server
				Advertise:   advertise[i],
			},
			Routes: routes[i],
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		go s.Start()
		servers[i] = s
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
	}
	testenv.Eventually(t, "a cluster of three with a JetStream meta leader", 30*time.Second, func() bool {
		leaders := 0
		for _, s := range servers {
			if s.NumRoutes() < 2 || !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				leaders++
			}
		}
		return leaders == 1
	})
	return servers, to0
}

// TestStartOnTheMajoritySide: server 0 of three is cut off from the other
// two with its member node, past the claim TTL; a node started on the
// majority side then serves within the claim TTL (a silent member is
// asked for 10 s before it is passed over) plus 5 s. leaf_nodes is read
// through the stream leader: a direct get may be routed to the cut-off
// replica and hold a start attempt for its whole 30 s.
func TestStartOnTheMajoritySide(t *testing.T) {
	servers, to0 := cuttableCluster(t)
	url := func(i int) string { return servers[i].ClientURL() }
	cfg := func(name string, i int) config.Config {
		return config.Config{Name: name, NATS: config.NATSConfig{URL: url(i)}, Store: config.StoreConfig{KVReplicas: 3}}
	}
	startNode(t, cfg("minority", 0))
	startNode(t, cfg("majority", 1))
	nc := natstest.Connect(t, url(2))
	if _, err := takeReady(nc, "split", 5, false); err != nil {
		t.Fatal(err)
	}
	to0.blackhole()
	// Past the claim TTL: the cut-off member's key has aged out, and the
	// majority side has elected its leaders.
	time.Sleep(12 * time.Second)
	began := time.Now()
	n, err := tryStart(t, cfg("newcomer", 2), 120*time.Second)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("start on the majority side: %v after %v", err, took)
	}
	t.Cleanup(func() { _ = n.Close(t.Context()) })
	t.Logf("a node started on the majority side served after %v", took.Round(time.Millisecond))
	if limit := 15 * time.Second; took > limit {
		t.Fatalf("a node started on the majority side served after %v, want within %v (claim TTL + 5 s)", took, limit)
	}
	// A request may still be routed to the cut-off node, through a route
	// that swallows bytes until the servers' pings give it up: ask again
	// after a timeout, as a client does.
	for try := 1; ; try++ {
		_, err := takeReady(nc, "split", 5, false)
		if err == nil {
			break
		}
		if !errors.Is(err, nats.ErrTimeout) || try == 10 {
			t.Fatal(err)
		}
	}
}
