package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// netFaults is the in-process Toxiproxy every link of the cluster goes
// through: leafd→nats-server (nats-1..3), leafd→MariaDB (db),
// leafd→ZooKeeper (zk), and each NATS route from server i to server j
// (route-i-j). The harness's own clients connect directly. Safe for
// concurrent use.
type netFaults struct {
	srv *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy
}

func newNetFaults() *netFaults {
	return &netFaults{
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}
}

func routeProxy(i, j int) string { return fmt.Sprintf("route-%d-%d", i+1, j+1) }

// add starts a proxy to upstream on a free loopback port and returns its
// address.
func (n *netFaults) add(name, upstream string) (string, error) {
	return n.addAt(name, "127.0.0.1:0", upstream)
}

// addAt starts a proxy to upstream listening on listen and returns its
// address.
func (n *netFaults) addAt(name, listen, upstream string) (string, error) {
	p := toxiproxy.NewProxy(n.srv, name, listen, upstream)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("proxy %s: %w", name, err)
	}
	n.mu.Lock()
	n.proxies[name] = p
	n.mu.Unlock()
	return p.Listen, nil
}

func (n *netFaults) get(name string) (*toxiproxy.Proxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.proxies[name]
	if p == nil {
		return nil, fmt.Errorf("no proxy %s", name)
	}
	return p, nil
}

// toxic is one Toxiproxy toxic, as its JSON API takes it.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]int `json:"attributes"`
}

// toxicsFor returns the toxics of a network fault kind: latency,
// blackhole, reset or replylost (partition has none: the proxy is closed).
func toxicsFor(kind string, hold time.Duration) []toxic {
	switch kind {
	case "latency":
		return latencyToxics(500*time.Millisecond, 100*time.Millisecond)
	case "blackhole": // timeout 0: nothing passes, nothing is closed
		return []toxic{
			{Name: "blackhole-up", Type: "timeout", Stream: "upstream", Toxicity: 1, Attributes: map[string]int{"timeout": 0}},
			{Name: "blackhole-down", Type: "timeout", Stream: "downstream", Toxicity: 1, Attributes: map[string]int{"timeout": 0}},
		}
	case "reset":
		return []toxic{
			{Name: "reset-up", Type: "reset_peer", Stream: "upstream", Toxicity: 1, Attributes: map[string]int{"timeout": 0}},
			{Name: "reset-down", Type: "reset_peer", Stream: "downstream", Toxicity: 1, Attributes: map[string]int{"timeout": 0}},
		}
	case "replylost": // statements reach the server; its replies vanish, then the connection closes
		return []toxic{
			{Name: "replylost-down", Type: "timeout", Stream: "downstream", Toxicity: 1, Attributes: map[string]int{"timeout": int(hold.Milliseconds())}},
		}
	}
	return nil
}

// latencyToxics delay every byte by d (±jitter) each way.
func latencyToxics(d, jitter time.Duration) []toxic {
	a := map[string]int{"latency": int(d.Milliseconds()), "jitter": int(jitter.Milliseconds())}
	return []toxic{
		{Name: "latency-up", Type: "latency", Stream: "upstream", Toxicity: 1, Attributes: a},
		{Name: "latency-down", Type: "latency", Stream: "downstream", Toxicity: 1, Attributes: a},
	}
}

// apply puts toxics on proxies; the returned func takes them off.
func (n *netFaults) apply(ctx context.Context, proxies []string, ts []toxic) (func(), error) {
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	for _, name := range proxies {
		p, err := n.get(name)
		if err != nil {
			undoAll()
			return nil, err
		}
		for _, t := range ts {
			b, _ := json.Marshal(t)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
				undoAll()
				return nil, fmt.Errorf("proxy %s toxic %s: %w", name, t.Name, err)
			}
			tname := t.Name
			undo = append(undo, func() { _ = p.Toxics.RemoveToxic(context.WithoutCancel(ctx), tname) })
		}
	}
	return undoAll, nil
}

// partition closes proxies (their connections dropped, new ones refused);
// the returned func opens them again on the same addresses.
func (n *netFaults) partition(proxies []string) (func() error, error) {
	var ps []*toxiproxy.Proxy
	for _, name := range proxies {
		p, err := n.get(name)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		p.Stop()
	}
	return func() error {
		var first error
		for _, p := range ps {
			var err error
			// The port was ours a moment ago; a few tries if the kernel
			// has not let go of it yet.
			for try := 0; try < 50; try++ {
				if err = p.Start(); err == nil || err == toxiproxy.ErrProxyAlreadyStarted {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && first == nil {
				first = fmt.Errorf("proxy %s: %w", p.Name, err)
			}
		}
		return first
	}, nil
}

func (n *netFaults) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.proxies {
		p.Stop()
	}
}

// linkProxies names the proxies of a link; for route, those between
// server k and the others.
func linkProxies(link string, k int) []string {
	switch link {
	case "nats":
		var out []string
		for i := range numNATS {
			out = append(out, fmt.Sprintf("nats-%d", i+1))
		}
		return out
	case "db", "zk":
		return []string{link}
	case "route":
		var out []string
		for i := range numNATS {
			if i != k {
				out = append(out, routeProxy(i, k), routeProxy(k, i))
			}
		}
		return out
	}
	return nil
}

// parseNetFault splits net-<kind>-<link> (or net-db-reply-lost).
func parseNetFault(f string) (kind, link string, ok bool) {
	if f == FaultNetDBReplyLost {
		return "replylost", "db", true
	}
	rest, ok := strings.CutPrefix(f, "net-")
	if !ok {
		return "", "", false
	}
	kind, link, ok = strings.Cut(rest, "-")
	if !ok {
		return "", "", false
	}
	switch kind {
	case "latency", "blackhole", "reset", "partition":
	default:
		return "", "", false
	}
	switch link {
	case "nats", "db", "zk", "route":
	default:
		return "", "", false
	}
	return kind, link, true
}

// net injects a network fault for NetFor.
func (f *faulter) net(ctx context.Context, fault string, r *FaultResult) error {
	kind, link, ok := parseNetFault(fault)
	if !ok {
		return fmt.Errorf("unknown fault %q", fault)
	}
	k := f.intN(numNATS)
	proxies := linkProxies(link, k)
	r.Target = fmt.Sprintf("%s on %s for %v", kind, strings.Join(proxies, ","), f.cfg.NetFor)
	n := f.c.net
	r.pauseFrom = time.Now()
	defer func() { r.pauseTo = time.Now() }()
	if kind == "partition" {
		heal, err := n.partition(proxies)
		if err != nil {
			return err
		}
		sleep(ctx, f.cfg.NetFor)
		return heal()
	}
	undo, err := n.apply(ctx, proxies, toxicsFor(kind, f.cfg.NetFor))
	if err != nil {
		return err
	}
	sleep(ctx, f.cfg.NetFor)
	if kind == "replylost" {
		// Leave the timeout toxic until it has closed the connections
		// whose replies it swallowed.
		sleep(ctx, 500*time.Millisecond)
	}
	undo()
	return nil
}
