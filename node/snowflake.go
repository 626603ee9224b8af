package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/snowflake"
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

// startSnowflake checks the clock against the peers, claims a worker id and
// starts the source and its ring. The responder joins the snowflake queue
// group later, once the source serves (applySnowflake).
func (n *Node) startSnowflake(ctx context.Context) error {
	cfg := n.cfg
	if cfg.Registry.Kind == RegistryOff {
		return nil
	}
	layout, err := cfg.layout()
	if err != nil {
		return err
	}
	now := cfg.snowClock()
	// Before checkLayout records the layout in the data directory: a layout
	// that cannot make ids is refused without becoming the one the next
	// start must match.
	if err := layout.Usable(now.Now()); err != nil {
		if errors.Is(err, snowflake.ErrExpired) {
			return fmt.Errorf("%w: choose a later epoch (--snowflake-epoch) or more time bits", err)
		}
		return fmt.Errorf("%w: %w: --snowflake-epoch must not be after the present", ErrConfig, err)
	}
	if err := n.checkLayout(layout); err != nil {
		return err
	}
	if err := n.checkPeerSnowflake(ctx, layout); err != nil {
		return err
	}
	n.sf.layout = layout
	n.sf.now = now.Now
	if cfg.Fault.ClockOffset != 0 || cfg.Fault.ClockStep != "" {
		n.log.Warn("FAULT DRILL: the snowflake clock is offset", "offset", cfg.Fault.ClockOffset, "step", cfg.Fault.ClockStep)
	}
	left := layout.Remaining(now.Now())
	n.log.Info("snowflake layout", "layout", layout.String(), "expires", layout.Expires(), "left", left.Round(time.Hour))
	if left < cfg.Snowflake.LayoutWarn {
		msg := fmt.Sprintf("the snowflake layout %s runs out of time bits at %v (%v from now): choose a later epoch or more time bits before then",
			layout, layout.Expires().UTC(), left.Round(time.Hour))
		n.log.Error(msg)
		n.events.Emit(events.Event{Kind: events.LayoutExpiring, Level: events.Error, Message: msg,
			Fields: map[string]any{"expires": layout.Expires().UTC(), "left_hours": int64(left.Hours()), "layout": layout.String()}})
	}
	if cfg.Snowflake.PeerClockMax > 0 {
		pc, err := n.peers.Clocks(ctx, now.Now)
		if err != nil {
			return err
		}
		if len(pc.Peers) > 0 {
			n.log.Info("peer clocks", "peers", len(pc.Peers), "offset", pc.Offset, "max", pc.Max)
			n.sf.peerOffset.Store(int64(pc.Offset))
			lvl := events.Info
			if pc.Offset.Abs() > cfg.Snowflake.PeerClockMax {
				lvl = events.Error
			}
			n.events.Emit(events.Event{Kind: events.ClockOffset, Level: lvl,
				Message: fmt.Sprintf("clock %v off the average of %d live nodes", (-pc.Offset).Round(time.Millisecond), len(pc.Peers)),
				Fields:  map[string]any{"offset_ms": float64(-pc.Offset) / 1e6, "peers": pc.Peers}})
			if pc.Offset.Abs() > cfg.Snowflake.PeerClockMax {
				return fmt.Errorf("snowflake: this clock is %v off the average of %d live nodes (%s), more than --peer-clock-max %v: fix the clock",
					(-pc.Offset).Round(time.Millisecond), len(pc.Peers), strings.Join(pc.Peers, ", "), cfg.Snowflake.PeerClockMax)
			}
		}
	}
	open, err := registries[cfg.Registry.Kind](n, layout)
	if err != nil {
		return err
	}
	// The worker ids this data directory held before a restart, with their
	// last leases: reported among the past ones (status), so that a node
	// that gets one of them (its records erased) starts above them.
	switch cfg.Registry.Kind {
	case RegistryKV, RegistryMySQL:
		n.sf.diskPast = snowflake.ReadLeaseFiles(filepath.Join(cfg.DataDir, "snowflake"), cfg.Registry.Kind)
	}
	n.sf.states = make(chan snowflake.State, 16)
	n.sf.src, err = snowflake.StartSource(ctx, snowflake.SourceConfig{
		Open:         open,
		Layout:       layout,
		Clock:        now,
		LeaseAhead:   cfg.Snowflake.LeaseAhead,
		MaxBackward:  cfg.Snowflake.MaxBackward,
		MaxStartWait: cfg.Snowflake.MaxStartWait,
		NewWorker:    n.noPeerServes,
		Holder:       n.peerHolder,
		PeerLease:    n.peers.Lease,
		ClockSkew:    max(cfg.Snowflake.PeerClockMax, 0),
		Logger:       n.log,
		OnEvent:      n.onSnowflake,
	})
	if err != nil {
		return err
	}
	n.sf.ring, err = producer.NewSnowflake(producer.SnowflakeConfig{
		IDs:    n.sf.src,
		Size:   cfg.Snowflake.Ring,
		MaxAge: max(time.Second, 2*layout.TimeUnit),
		TimeOf: func(id int64) time.Time { return layout.Decompose(id).Time },
		Clock:  now,
		Logger: n.log,
	})
	return err
}

// onSnowflake is the source's OnEvent: publish the event and hand the state
// to applySnowflake (never joining or leaving the queue group from a
// handler's goroutine).
func (n *Node) onSnowflake(ev snowflake.Event) {
	if ev.Registered {
		n.sf.held.Store(true)
	}
	n.sf.transitions.Add(1)
	e := events.Event{Kind: "snowflake." + ev.State.String(), Level: events.Info, Message: ev.Reason,
		Fields: map[string]any{"worker": ev.Worker}}
	if !ev.Until.IsZero() {
		e.Fields["until"] = ev.Until.UTC()
	}
	switch ev.State {
	case snowflake.StatePaused, snowflake.StateLost:
		e.Level = events.Error
	case snowflake.StateWaiting:
		e.Level = events.Warn
	}
	n.events.Emit(e)
	select {
	case n.sf.states <- ev.State:
	default: // applySnowflake reads the source's state anyway
	}
}

// applySnowflake keeps the responder in the snowflake queue group exactly
// while the source serves.
func (n *Node) applySnowflake() {
	defer n.sf.wg.Done()
	t := n.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.sf.stop:
			return
		case <-n.sf.states:
		case <-t.C():
		}
		on := n.sf.src.State() == snowflake.StateServing
		was := n.SnowflakeJoined()
		if err := n.resp.SetSnowflake(on); err != nil {
			n.log.Warn("snowflake queue group change failed", "join", on, "err", err)
			continue
		}
		switch {
		case on && !was:
			n.events.Emit(events.Event{Kind: events.QueueJoined, Message: "joined the snowflake queue group",
				Fields: map[string]any{"worker": n.sf.src.Worker()}})
		case !on && was:
			n.events.Emit(events.Event{Kind: events.QueueLeft, Level: events.Warn,
				Message: "left the snowflake queue group: snowflake is " + n.sf.src.State().String(),
				Fields:  map[string]any{"worker": n.sf.src.Worker()}})
		}
	}
}

// SnowflakeJoined reports whether the node is in the snowflake queue group
// (it leaves while its snowflake source does not serve).
func (n *Node) SnowflakeJoined() bool { return n.resp != nil && n.resp.SnowflakeService() != nil }

// Snowflake is the node's snowflake source, or nil when it has none.
func (n *Node) Snowflake() *snowflake.Source { return n.sf.src }

// leaseFiles keeps this host's own copy of each worker id's time leases in
// dir (snowflake.NewLeaseFiles), so that a restart on this data directory
// never starts a worker below a lease it had, even after an operator wiped
// the registry. A directory that cannot be written costs that copy, with a
// warning, not snowflake.
func (n *Node) leaseFiles(r snowflake.Registry, dir, prefix string) snowflake.Registry {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.log.Warn("snowflake: no local copy of the time leases", "dir", dir, "err", err)
		return r
	}
	return snowflake.NewLeaseFiles(r, dir, prefix)
}

// noPeerServes reports whether no live node says it holds worker: asked
// when the registry has no time lease for a worker id it gave this node
// (an operator deleted its record, or the whole registry, under a live
// node; see snowflake.SourceConfig.NewWorker). A node that does not answer
// (frozen, cut off) is not seen: README, "Outside the promise".
func (n *Node) noPeerServes(ctx context.Context, worker int64) bool {
	peers, err := n.peers.Recent(ctx)
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their worker ids; waiting out the claim TTL", "worker", worker, "err", err)
		return false
	}
	for _, p := range peers {
		if p.Snow.Holds(worker) {
			n.log.Warn("snowflake: a live node holds the worker id the registry gave this node with no lease on record (its record was deleted?)",
				"worker", worker, "holder", p.Node, "holder_state", p.Snow.State)
			return false
		}
	}
	return true
}

// checkPeerSnowflake refuses to serve snowflake beside live nodes that use
// another layout (the same time maps to other bits: ids of the two can be
// equal): all answer leaf.snowflake in one queue group. A new data
// directory has no layout record of its own (checkLayout); its peers are
// the record. Live nodes that take worker ids from another registry (two
// registries can give the same worker id) get a loud warning: the chaos
// harness mixes ZooKeeper and KV nodes on purpose.
func (n *Node) checkPeerSnowflake(ctx context.Context, layout snowflake.Layout) error {
	live, err := n.peers.Statuses(ctx)
	if errors.Is(err, peers.ErrSilent) {
		return err // Start asks again
	}
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their layout and registry", "err", err)
		return nil
	}
	for _, p := range live {
		if p.Snow == nil {
			continue
		}
		switch {
		case p.Snow.Layout != layout.String():
			return fmt.Errorf("%w: snowflake: live node %s serves layout %s, this node %s: their ids can be equal; give every node the same --snowflake-layout, --snowflake-epoch and --snowflake-unit",
				ErrConfig, p.Node, p.Snow.Layout, layout)
		case p.Snow.Registry != n.cfg.Registry.Kind:
			msg := fmt.Sprintf("live node %s takes snowflake worker ids from %s, this node from %s: two registries can give the same worker id, and then the same ids; give every node the same --worker-registry",
				p.Node, p.Snow.Registry, n.cfg.Registry.Kind)
			n.log.Error(msg)
		}
	}
	return nil
}

// peerClockEvery is how often a serving node compares its clock with its
// peers' again (at start, a clock too far off refuses snowflake).
var peerClockEvery = 30 * time.Second

// watchPeerClocks measures the clock offset to the live peers every
// peerClockEvery (leafmq_snowflake_peer_clock_offset_seconds): a clock that
// drifts after the start shows up in the metric and its alert, and in an
// error event past --peer-clock-max. Ends with sfStop.
func (n *Node) watchPeerClocks() {
	defer n.sf.wg.Done()
	t := n.clock.NewTicker(peerClockEvery)
	defer t.Stop()
	for {
		select {
		case <-n.sf.stop:
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pc, err := ask.PeerClocksBut(ctx, n.nc, 500*time.Millisecond, n.sf.now, n.cfg.Name)
		cancel()
		if err != nil || len(pc.Peers) == 0 {
			continue
		}
		n.sf.peerOffset.Store(int64(pc.Offset))
		if max := n.cfg.Snowflake.PeerClockMax; max > 0 && pc.Offset.Abs() > max {
			msg := fmt.Sprintf("clock %v off the average of %d live nodes, more than --peer-clock-max %v: fix the clock (NTP)",
				(-pc.Offset).Round(time.Millisecond), len(pc.Peers), max)
			n.log.Error(msg)
			n.events.Emit(events.Event{Kind: events.ClockOffset, Level: events.Error, Message: msg,
				Fields: map[string]any{"offset_ms": float64(-pc.Offset) / 1e6, "peers": pc.Peers}})
		}
	}
}
