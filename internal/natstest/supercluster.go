package natstest

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// SuperCluster is clusters of embedded nats-servers joined by NATS
// gateways, as RunSuperCluster starts them. Every gateway connection into
// cluster i passes through one of Links[i] (a Toxiproxy proxy in front of
// each of its servers' gateway port, which the servers advertise), so
// Slow and Cut act on everything cluster i receives from the others.
type SuperCluster struct {
	t        testing.TB
	Names    []string             // cluster i's name, also its gateway's: "c0", "c1", …
	Clusters [][]*server.Server   // cluster i's servers, named "c<i>-n<j>"
	Links    [][]*toxiproxy.Proxy // Links[i][j]: in front of server j of cluster i's gateway port
}

// RunSuperCluster starts len(sizes) clusters (at least two), cluster i of
// sizes[i] routed servers (1 to 3), each with JetStream and its own store
// directory, all on 127.0.0.1, joined by gateways into one supercluster.
// It waits (bounded by 30 s) until every server routes to its cluster,
// has a gateway to every other cluster, and sees the JetStream meta
// leader with every server as a peer. Servers and links stop at clean-up.
func RunSuperCluster(t testing.TB, sizes ...int) *SuperCluster {
	t.Helper()
	if len(sizes) < 2 {
		t.Fatalf("natstest: RunSuperCluster(%v): need at least two clusters", sizes)
	}
	total := 0
	for _, n := range sizes {
		if n < 1 || n > 3 {
			t.Fatalf("natstest: RunSuperCluster(%v): a cluster has 1 to 3 servers", sizes)
		}
		total += n
	}
	ports := freePorts(t, 3*total) // client, route and gateway port of each server
	sc := &SuperCluster{t: t}
	type srv struct{ client, route, gateway int }
	srvs := make([][]srv, len(sizes))
	gwURLs := make([][]*url.URL, len(sizes)) // the links into cluster i
	k := 0
	for i, n := range sizes {
		sc.Names = append(sc.Names, fmt.Sprintf("c%d", i))
		sc.Links = append(sc.Links, nil)
		for range n {
			s := srv{ports[3*k], ports[3*k+1], ports[3*k+2]}
			k++
			srvs[i] = append(srvs[i], s)
			p := Proxy(t, fmt.Sprintf("127.0.0.1:%d", s.gateway))
			sc.Links[i] = append(sc.Links[i], p)
			gwURLs[i] = append(gwURLs[i], &url.URL{Scheme: "nats", Host: p.Listen})
		}
	}
	base := t.TempDir()
	for i, n := range sizes {
		var routes []*url.URL // a lone server routes to itself: JetStream in a supercluster needs a route
		for _, s := range srvs[i] {
			routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", s.route)})
		}
		var remotes []*server.RemoteGatewayOpts
		for o := range sizes {
			if o != i {
				remotes = append(remotes, &server.RemoteGatewayOpts{Name: sc.Names[o], URLs: gwURLs[o]})
			}
		}
		sc.Clusters = append(sc.Clusters, make([]*server.Server, n))
		for j, s := range srvs[i] {
			name := fmt.Sprintf("%s-n%d", sc.Names[i], j)
			sc.Clusters[i][j] = start(t, &server.Options{
				ServerName: name,
				Host:       "127.0.0.1",
				Port:       s.client,
				JetStream:  true,
				StoreDir:   filepath.Join(base, name),
				NoLog:      true,
				NoSigs:     true,
				Cluster:    server.ClusterOpts{Name: sc.Names[i], Host: "127.0.0.1", Port: s.route},
				Routes:     routes,
				Gateway: server.GatewayOpts{
					Name:      sc.Names[i],
					Host:      "127.0.0.1",
					Port:      s.gateway,
					Advertise: sc.Links[i][j].Listen, // the others connect through the link, also when told of it by gossip
					Gateways:  remotes,
				},
			})
		}
	}
	sc.wait("formed", sc.ready)
	return sc
}

// URL is the client URLs of cluster i's servers, joined by commas.
func (sc *SuperCluster) URL(i int) string { return ClientURLs(sc.Clusters[i]) }

// Slow delays every byte into cluster i over a gateway by d, each way of
// each connection: with both clusters of a pair slowed by d, a gateway
// round trip takes 2d more.
func (sc *SuperCluster) Slow(i int, d time.Duration) {
	sc.t.Helper()
	for _, p := range sc.Links[i] {
		BothWays(sc.t, p, "latency", "latency", int(d.Milliseconds()))
	}
}

// Cut drops every byte into cluster i over a gateway, until Heal; the
// connections stay open. To part two clusters, cut both.
func (sc *SuperCluster) Cut(i int) {
	sc.t.Helper()
	for _, p := range sc.Links[i] {
		BothWays(sc.t, p, "timeout", "timeout", 0)
	}
}

// Heal ends Cut(i): the connections through its links close, and Heal
// waits (bounded by 30 s) until every other cluster has a gateway
// connection into cluster i again, made after the heal. It does not wait
// for JetStream, which has no quorum while another cut stands.
func (sc *SuperCluster) Heal(i int) {
	sc.t.Helper()
	healed := time.Now()
	for _, p := range sc.Links[i] {
		for _, stream := range []string{"upstream", "downstream"} {
			if err := p.Toxics.RemoveToxic(context.Background(), "timeout-"+stream); err != nil {
				sc.t.Fatalf("natstest: heal cluster %s: %v", sc.Names[i], err)
			}
		}
	}
	sc.wait("healed", func() bool {
		for o, servers := range sc.Clusters {
			if o == i {
				continue
			}
			for _, s := range servers {
				gz, err := s.Gatewayz(&server.GatewayzOptions{Name: sc.Names[i]})
				if err != nil {
					return false
				}
				out := gz.OutboundGateways[sc.Names[i]]
				if out == nil || out.Connection == nil || out.Connection.Start.Before(healed) {
					return false
				}
			}
		}
		return true
	})
}

// wait polls until cond holds, what it is called in the failure.
func (sc *SuperCluster) wait(what string, cond func() bool) {
	sc.t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			sc.t.Fatalf("natstest: supercluster %s not %s within %v", strings.Join(sc.Names, ","), what, clusterTimeout)
		}
		time.Sleep(pollInterval)
	}
}

// ready: every server routes to its cluster and has a gateway to every
// other cluster, and JetStream has a meta leader that sees every server.
func (sc *SuperCluster) ready() bool {
	var all []*server.Server
	for _, servers := range sc.Clusters {
		for _, s := range servers {
			if s.NumRoutes() < len(servers)-1 || s.NumOutboundGateways() < len(sc.Clusters)-1 {
				return false
			}
		}
		all = append(all, servers...)
	}
	var leader *server.Server
	for _, s := range all {
		if !s.JetStreamIsCurrent() {
			return false
		}
		if s.JetStreamIsLeader() {
			leader = s
		}
	}
	return leader != nil && len(leader.JetStreamClusterPeers()) == len(all)
}

// WaitNoMetaLeader waits, up to 45 s, until cluster i's servers refuse the
// message gets of stream for want of a JetStream meta leader (503, err
// 10008): the meta group spans every cluster, so a cluster cut off from
// the others' majority loses it a few seconds after the cut, although the
// stream's own leader may be among its servers.
func (sc *SuperCluster) WaitNoMetaLeader(i int, stream string) {
	sc.t.Helper()
	nc := Connect(sc.t, sc.URL(i))
	deadline := time.Now().Add(45 * time.Second)
	for {
		m, err := nc.Request("$JS.API.STREAM.MSG.GET."+stream, []byte(`{"last_by_subj":"none"}`), time.Second)
		if err == nil && strings.Contains(string(m.Data), "10008") {
			return
		}
		if time.Now().After(deadline) {
			sc.t.Fatalf("natstest: cluster %s still has a JetStream meta leader 45s after the cut (last answer %v)", sc.Names[i], err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
