package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
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
	l, err := c.Layout()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Snowflake.LeaseAhead == 0 { // 3s, or 10 ticks of a coarser layout
		c.Snowflake.LeaseAhead = max(snowflake.DefaultLeaseAhead, 10*l.TimeUnit)
	}
	if c.Registry.Kind == RegistryStatic && (c.Registry.WorkerID < 0 || c.Registry.WorkerID > l.MaxWorker()) {
		within := ""
		if c.Region.On() {
			within = fmt.Sprintf(" (the worker within region %d)", c.Region.ID)
		}
		return fmt.Errorf("%w: worker-id %d must be 0-%d%s for layout %s", ErrConfig, c.Registry.WorkerID, l.MaxWorker(), within, l)
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

// Layout is the snowflake layout of the Snowflake settings (checked by
// Validate). With regions (--regions N) it has region bits enough for N:
// a layout without them (leaf, uidgen, TIME+WORKER+SEQ) gives up
// ceil(log2 N) of its worker bits; one with them (leaf-dc,
// TIME+REGION+WORKER+SEQ) must hold N. A layout with region bits is
// refused without regions.
func (c *Config) Layout() (snowflake.Layout, error) {
	l, err := snowflake.ParseLayout(c.Snowflake.Layout, c.Snowflake.TimeUnit, c.Snowflake.Epoch)
	if err != nil {
		return l, err
	}
	if !c.Region.On() {
		if l.RegionBits > 0 {
			return snowflake.Layout{}, fmt.Errorf("%w: --snowflake-layout %s has %d region bits, but the deployment has no regions: "+
				"add --regions N (how many regions, at most %d) and --region-id R, or use a layout without region bits",
				snowflake.ErrInvalidLayout, c.Snowflake.Layout, l.RegionBits, 1<<l.RegionBits)
		}
		return l, nil
	}
	r, err := l.ForRegions(c.Region.Count)
	if err != nil {
		return snowflake.Layout{}, fmt.Errorf("--regions %d with --snowflake-layout %s: %w", c.Region.Count, c.Snowflake.Layout, err)
	}
	return r, nil
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

// SnowClock is the node's snowflake clock: Config.Clock, unless a fault
// drill offsets or steps its readings (its timers stay Config.Clock's).
func (c *Config) SnowClock() clock.Clock {
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
