package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snownode"
	"github.com/leafmq/leafmq/wire"
)

// Registries of --worker-registry.
const (
	RegistryKV     = "kv"
	RegistryZK     = "zk"
	RegistryMySQL  = "mysql"
	RegistryStatic = "static"
	RegistryOff    = "off"
)

// validateSnowflake checks the worker registry and the snowflake layout,
// after Validate resolved the registry's defaults.
func (c *Config) validateSnowflake() error {
	switch c.Registry.Kind {
	case RegistryOff:
		return nil
	case RegistryKV, RegistryStatic:
	case RegistryZK:
		if c.Registry.ZK == "" {
			return fmt.Errorf("%w: --worker-registry zk needs --zk host:port", ErrConfig)
		}
		if err := c.zkIdentity(); err != nil {
			return err
		}
		if strings.Contains(c.Registry.ZKName, "/") {
			return fmt.Errorf("%w: --zk-name %q must not contain /", ErrConfig, c.Registry.ZKName)
		}
	case RegistryMySQL:
		if c.Registry.WorkerMySQL == "" {
			return fmt.Errorf("%w: --worker-registry mysql needs --worker-mysql or --mysql", ErrConfig)
		}
	default:
		return fmt.Errorf("%w: worker-registry %q must be kv, zk, mysql, static or off", ErrConfig, c.Registry.Kind)
	}
	l, err := c.layout()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Snowflake.LeaseAhead == 0 { // 3s, or 10 ticks of a coarser layout
		c.Snowflake.LeaseAhead = max(snowflake.DefaultLeaseAhead, 10*l.TimeUnit)
	}
	if c.Registry.Kind == RegistryStatic && (c.Registry.WorkerID < 0 || c.Registry.WorkerID > l.MaxWorker()) {
		return fmt.Errorf("%w: worker-id %d must be 0-%d for layout %s", ErrConfig, c.Registry.WorkerID, l.MaxWorker(), l)
	}
	if c.Snowflake.LeaseAhead < 4*l.TimeUnit || c.Snowflake.MaxBackward < 0 || c.Snowflake.MaxStartWait < 0 || c.Snowflake.LayoutWarn < 0 {
		return fmt.Errorf("%w: lease-ahead %v (at least 4 ticks), max-backward %v, max-start-wait %v, layout-warn %v",
			ErrConfig, c.Snowflake.LeaseAhead, c.Snowflake.MaxBackward, c.Snowflake.MaxStartWait, c.Snowflake.LayoutWarn)
	}
	if c.Snowflake.Ring < 2 || c.Snowflake.Ring > 1<<22 {
		return fmt.Errorf("%w: snowflake-ring %d must be 2-4194304", ErrConfig, c.Snowflake.Ring)
	}
	if _, _, err := parseStep(c.Fault.ClockStep); err != nil {
		return fmt.Errorf("%w: fault-clock-step: %v", ErrConfig, err)
	}
	return nil
}

// interfaceAddrs lists the host's addresses (a variable for tests).
var interfaceAddrs = net.InterfaceAddrs

// zkIdentity sets and checks ZKAddr, the node's ip:port in ZooKeeper,
// which names its worker znode. By default it is the host of --http when
// that is not a wildcard, else the host's first non-loopback address (as
// Leaf takes its local ip), with the HTTP port: an address of this host, so
// that hosts with identical configurations get distinct worker ids. A
// loopback identity is refused when a ZooKeeper server is not on loopback:
// every host would have it.
func (c *Config) zkIdentity() error {
	if c.Registry.ZKAddr == "" {
		if c.HTTP.Addr == "off" {
			return fmt.Errorf("%w: --worker-registry zk with --http off needs --zk-addr <this host's ip>:<port>", ErrConfig)
		}
		if err := c.defaultZKAddr(); err != nil {
			return err
		}
	}
	host, port, err := net.SplitHostPort(c.Registry.ZKAddr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%w: --zk-addr %q must be ip:port (it names this node's worker znode)", ErrConfig, c.Registry.ZKAddr)
	}
	if isLoopback(host) && !zkOnLoopback(c.Registry.ZK) {
		return fmt.Errorf("%w: the ZooKeeper identity %s is a loopback address but ZooKeeper (%s) is not on loopback: "+
			"every host would claim the same worker id; set --zk-addr <this host's ip>:<port> (or --http to this host's address)",
			ErrConfig, c.Registry.ZKAddr, c.Registry.ZK)
	}
	return nil
}

// defaultZKAddr sets ZKAddr to its default (see zkIdentity), if HTTP is on.
func (c *Config) defaultZKAddr() error {
	if c.Registry.ZKAddr != "" || c.HTTP.Addr == "off" {
		return nil
	}
	host, port, _ := net.SplitHostPort(c.HTTP.Addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		h, err := hostIP()
		if err != nil {
			if c.Registry.Kind == RegistryZK && !zkOnLoopback(c.Registry.ZK) {
				return fmt.Errorf("%w: --worker-registry zk: %v; set --zk-addr <this host's ip>:<port>", ErrConfig, err)
			}
			h = "127.0.0.1" // ZooKeeper on this host too: one host, one identity
		}
		host = h
	}
	c.Registry.ZKAddr = net.JoinHostPort(host, port)
	return nil
}

// hostIP returns the host's first non-loopback, non-link-local address,
// IPv4 first.
func hostIP() (string, error) {
	addrs, err := interfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("list the host's addresses: %v", err)
	}
	var v6 string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() || n.IP.IsUnspecified() || n.IP.IsMulticast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if v6 == "" {
			v6 = n.IP.String()
		}
	}
	if v6 != "" {
		return v6, nil
	}
	return "", errors.New("the host has no non-loopback address")
}

// isLoopback reports whether host (an IP or a name) is on loopback; a name
// that does not resolve is not.
func isLoopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// zkOnLoopback reports whether every server of --zk is on loopback.
func zkOnLoopback(servers string) bool {
	for _, s := range strings.Split(servers, ",") {
		host, _, err := net.SplitHostPort(strings.TrimSpace(s))
		if err != nil {
			host = strings.TrimSpace(s)
		}
		if !isLoopback(host) {
			return false
		}
	}
	return true
}

func (c *Config) layout() (snowflake.Layout, error) {
	return snowflake.ParseLayout(c.Snowflake.Layout, c.Snowflake.TimeUnit, c.Snowflake.Epoch)
}

// parseStep parses BY@AFTER.
func parseStep(s string) (by, after time.Duration, err error) {
	if s == "" {
		return 0, 0, nil
	}
	b, a, ok := strings.Cut(s, "@")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want BY@AFTER like -10s@5s", s)
	}
	if by, err = time.ParseDuration(b); err != nil {
		return 0, 0, fmt.Errorf("%q: %v", s, err)
	}
	if after, err = time.ParseDuration(a); err != nil || after < 0 {
		return 0, 0, fmt.Errorf("%q: AFTER must be a non-negative duration", s)
	}
	return by, after, nil
}

// snowClock is the node's snowflake clock: Config.Clock, unless a fault
// drill offsets or steps its readings (its timers stay Config.Clock's).
func (c *Config) snowClock() clock.Clock {
	base := clock.Or(c.Clock)
	by, after, _ := parseStep(c.Fault.ClockStep)
	off := c.Fault.ClockOffset
	if off == 0 && by == 0 {
		return base
	}
	stepAt := base.Now().Add(after)
	return clock.WithNow(base, func() time.Time {
		now := base.Now()
		if by != 0 && !now.Before(stepAt) {
			return now.Add(off + by)
		}
		return now.Add(off)
	})
}

// newSnowflake makes the node's snowflake (n.serve.sf; none with
// --worker-registry off) before the node answers anyone: a starting
// node's status names the worker id it registers.
func (n *Node) newSnowflake() error {
	cfg := n.cfg
	if cfg.Registry.Kind == RegistryOff {
		return nil
	}
	layout, err := cfg.layout()
	if err != nil {
		return err
	}
	open, err := registries[cfg.Registry.Kind](n, layout)
	if err != nil {
		return err
	}
	var leaseFiles string // the registries that keep lease files of this data directory (leaseFiles)
	switch cfg.Registry.Kind {
	case RegistryKV, RegistryMySQL:
		leaseFiles = cfg.Registry.Kind
	}
	if cfg.Fault.ClockOffset != 0 || cfg.Fault.ClockStep != "" {
		n.log.Warn("FAULT DRILL: the snowflake clock is offset", "offset", cfg.Fault.ClockOffset, "step", cfg.Fault.ClockStep)
	}
	n.serve.sf = snownode.New(snownode.Config{
		Name:           cfg.Name,
		Registry:       cfg.Registry.Kind,
		Layout:         layout,
		DataDir:        cfg.DataDir,
		LeaseFiles:     leaseFiles,
		Open:           open,
		Clock:          n.clock,
		IDClock:        cfg.snowClock(),
		LeaseAhead:     cfg.Snowflake.LeaseAhead,
		MaxBackward:    cfg.Snowflake.MaxBackward,
		MaxStartWait:   cfg.Snowflake.MaxStartWait,
		Ring:           cfg.Snowflake.Ring,
		LayoutWarn:     cfg.Snowflake.LayoutWarn,
		PeerClockMax:   cfg.Snowflake.PeerClockMax,
		PeerClockEvery: peerClockEvery,
		Peers:          n.snowflakePeers,
		Holder:         n.peerHolder,
		Lease:          n.peers.Lease,
		NewWorker:      n.noPeerServes,
		Clocks:         n.peers.Clocks,
		Conn:           n.conn.NC(),
		Events:         n.events,
		Logger:         n.log,
	})
	return nil
}

// startSnowflake is one attempt to start the node's snowflake
// (snownode.Server.Start); its refusals of the configuration are ErrConfig.
func (n *Node) startSnowflake(ctx context.Context) error {
	err := n.serve.sf.Start(ctx)
	if errors.Is(err, snownode.ErrConfig) {
		return refused{err}
	}
	return err
}

// refused is an error of a package below that refuses the configuration:
// an ErrConfig, with the message it has.
type refused struct{ error }

func (r refused) Is(target error) bool { return target == ErrConfig }
func (r refused) Unwrap() error        { return r.error }

// SnowflakeJoined reports whether the node is in the snowflake queue group
// (it leaves while its snowflake source does not serve).
func (n *Node) SnowflakeJoined() bool {
	return n.serve.resp != nil && n.serve.resp.SnowflakeService() != nil
}

// Snowflake is the node's snowflake source, or nil when it has none.
func (n *Node) Snowflake() *snowflake.Source { return n.serve.sf.Source() }

// snowflakePeers is snownode.Config.Peers: the live nodes other than this
// process, each member waited for. Members that did not answer fail the
// attempt (Start asks again); a gather that fails otherwise checks against
// no one, with a warning.
func (n *Node) snowflakePeers(ctx context.Context) ([]wire.NodeStatus, error) {
	live, err := n.peers.Statuses(ctx)
	if errors.Is(err, peers.ErrSilent) {
		return nil, err
	}
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their layout and registry", "err", err)
		return nil, nil
	}
	return live, nil
}

// noPeerServes reports whether no live node says it holds worker: asked
// when the registry has no time lease for a worker id it gave this node
// (an operator deleted its record, or the whole registry, under a live
// node; see snowflake.SourceConfig.NewWorker). A node that does not answer
// (frozen, cut off) is not seen: README, "Outside the promise".
func (n *Node) noPeerServes(ctx context.Context, worker int64) bool {
	live, err := n.peers.Recent(ctx)
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their worker ids; waiting out the claim TTL", "worker", worker, "err", err)
		return false
	}
	for _, p := range live {
		if p.Snow.Holds(worker) {
			n.log.Warn("snowflake: a live node holds the worker id the registry gave this node with no lease on record (its record was deleted?)",
				"worker", worker, "holder", p.Node, "holder_state", p.Snow.State)
			return false
		}
	}
	return true
}

// peerClockEvery is how often a serving node compares its clock with its
// peers' again (snownode.Config.PeerClockEvery; at start, a clock too far
// off refuses snowflake).
var peerClockEvery = 30 * time.Second

// serveSnowflake puts the node in the snowflake queue group while its
// worker serves (snownode.Server.Serve).
func (n *Node) serveSnowflake(context.Context) error { return n.serve.sf.Serve(n.serve.resp) }

func (n *Node) stopSnowflake(context.Context) error { n.serve.sf.Stop(); return nil }
