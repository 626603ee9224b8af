package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Faults of the many-regions mode (Config.Regions ≥ 2). Each strikes one
// region, picked in turn, for Config.RegionFor.
const (
	// FaultRegionCut: every gateway link into and out of the region
	// blackholed (nothing passes, the connections stay open). The region
	// serves its own clients from its own store; so do the others.
	FaultRegionCut = "region-cut"
	// FaultRegionKill: kill -9 the region's leafds (its NATS still up:
	// its clients' requests cross a gateway to another region's queue
	// group members), then its nats-server (its clients fail over to
	// another region's server); both restarted after RegionFor.
	FaultRegionKill = "region-kill"
	// FaultRegionPartition: the region's gateway proxies closed (the
	// connections dropped, new ones refused) while the clients of every
	// region keep asking; then opened again.
	FaultRegionPartition = "region-partition"
)

// RegionFaults is the default schedule of the many-regions mode.
var RegionFaults = []string{FaultRegionCut, FaultRegionKill, FaultRegionPartition}

// Schedule shape of the many-regions mode.
const (
	regionWarmup = 6 * time.Second // load before the first fault: the calm figures
	regionCalm   = 5 * time.Second // load after each fault's recovery
	regionProbe  = 250 * time.Millisecond
	rttSubject   = "leafchaos.rtt." // + region index: answered by the harness in that region only
)

// regionsMinAnswered is the share of its requests each region must get
// ids for while a region is cut or partitioned (neither side needs the
// other, so only the moment of the strike costs anything), and in each
// phase of a kill (the killed region's clients are answered by another
// region's leafds: only the requests in flight at each kill are lost).
const regionsMinAnswered = 0.9

// region is one region of the many-regions mode: a NATS cluster named
// name (ServersPerRegion servers), and its leafds.
type region struct {
	idx      int
	name     string
	nats     []*proc
	addrs    []string     // each nats-server's client host:port (the harness's clients)
	mons     []string     // their monitoring host:port
	leafdURL string       // the proxies leafd reaches them through, comma-separated
	gwPorts  map[int]bool // the ports of the proxies its servers' outbound gateways go through
	leafds   []*leafd
	conns    []atomic.Pointer[nats.Conn] // the region's clients
	dropped  atomic.Int64                // load slots no worker was free for (never sent)
}

// reqRec is one request of the many-regions load.
type reqRec struct {
	at  int64 // ns since t0 it was sent
	lat int64 // ns it took
	ok  bool
	by  int8 // the region whose id it got (segment: id mod N; snowflake: its region bits); -1 none
}

// rttRec is one probe of a region's harness responder.
type rttRec struct {
	at   int64
	lat  int64
	from int8
	to   int8
	ok   bool
}

type regionsRun struct {
	cfg    *Config
	c      *cluster
	rs     []*region
	layout snowflake.Layout
	spaces map[string]*idSpace
	t0     time.Time

	mu   sync.Mutex
	recs [][]reqRec // per region of the client
	rtts []rttRec
}

// RunRegions runs the many-regions mode: Config.Regions one-server NATS
// clusters joined by gateways through Toxiproxy links (GatewayLatency each
// way), LeafdsPerRegion leafds in each with --regions N --region-id i on
// JetStream KV (store and worker ids), clients in each region, and the
// region faults of Config.Faults one after another. No MariaDB or
// ZooKeeper. Every id of every region goes into one id space per segment
// tag and one for snowflake.
func RunRegions(ctx context.Context, cfg Config) (*RegionsReport, error) {
	if err := cfg.validateRegions(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	dir, done, err := workDir(&cfg, "leafchaos-regions-")
	if err != nil {
		return nil, err
	}
	defer done()
	c := &cluster{cfg: &cfg, log: log, dir: dir, net: newNetFaults()}
	defer c.close()
	log.Info("chaos: building binaries", "dir", dir)
	if err := c.build(ctx); err != nil {
		return nil, err
	}
	layout, err := snowflake.LeafLayout().ForRegions(cfg.Regions)
	if err != nil {
		return nil, err
	}
	rr := &regionsRun{cfg: &cfg, c: c, layout: layout, spaces: map[string]*idSpace{},
		recs: make([][]reqRec, cfg.Regions)}
	log.Info("chaos: starting regions", "regions", cfg.Regions, "gateway_latency", cfg.GatewayLatency)
	if err := rr.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := rr.waitGateways(ctx, -1, time.Time{}); err != nil {
		return nil, err
	}
	rr.waitMeta(ctx)
	if err := rr.startLeafds(ctx); err != nil {
		return nil, err
	}
	for _, r := range rr.rs {
		if err := rr.connect(r); err != nil {
			return nil, err
		}
	}
	defer rr.closeConns()
	stopRTT, err := rr.rttResponders()
	if err != nil {
		return nil, err
	}
	defer stopRTT()

	rr.t0 = time.Now()
	for _, tag := range cfg.Tags {
		rr.spaces["segment."+tag] = newIDSpace(rr.t0.UnixNano(), int64(time.Second))
	}
	rr.spaces["snowflake"] = newIDSpace(rr.t0.UnixNano(), int64(time.Second))
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for _, r := range rr.rs {
		wg.Add(1)
		go func() { defer wg.Done(); rr.load(loadCtx, r) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); rr.probe(loadCtx) }()

	rep := &RegionsReport{Regions: cfg.Regions, LeafdsPerRegion: cfg.LeafdsPerRegion, ServersPerRegion: cfg.ServersPerRegion,
		GatewayLatency: cfg.GatewayLatency, RegionFor: cfg.RegionFor, Seed: cfg.Seed, Started: rr.t0}
	sleep(ctx, regionWarmup)
	calmEnd := time.Since(rr.t0)
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 3))
	start := rng.IntN(cfg.Regions)
	for i, f := range cfg.Faults {
		if ctx.Err() != nil {
			break
		}
		k := (start + i) % cfg.Regions
		res := rr.strike(ctx, f, k)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s %s on %s: %s (recovery %v)\n", time.Now().Format("15:04:05"), f, rr.rs[k].name,
				orOK(res.Err), res.Recovery.Round(time.Millisecond))
		}
		rep.Faults = append(rep.Faults, res)
		sleep(ctx, rr.calm())
		rep.Faults[len(rep.Faults)-1].DuplicatesAfter = rr.duplicatesSoFar()
	}
	if rest := cfg.Duration - time.Since(rr.t0); rest > 0 {
		sleep(ctx, rest)
	}
	stopLoad()
	wg.Wait()
	rep.Ended = time.Now()
	rr.finish(rep, calmEnd)
	return rep, nil
}

// calm is how long the load runs after a fault's recovery before the
// next fault: regionCalm, or with Goals the recovery goal plus
// goalSustain, so that each region is judged after each fault.
func (rr *regionsRun) calm() time.Duration {
	if rr.cfg.Goals {
		return regionRecoveryGoal + goalSustain
	}
	return regionCalm
}

func orOK(err string) string {
	if err == "" {
		return "ok"
	}
	return err
}

// validateRegions fills the defaults of the many-regions mode and checks
// its settings. Defaults that differ from the single-region mode's: rate
// 600, concurrency 32, 2 connections per region, batches up to 50 (every
// segment id of a region is N apart, so each is a run of its own in the
// id space).
func (c *Config) validateRegions() error {
	if c.Regions < 2 || c.Regions > 3 {
		return fmt.Errorf("%w: --regions %d: the many-regions mode has 2 or 3 regions", ErrConfig, c.Regions)
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Rate, 600)
	def(&c.Concurrency, 32)
	def(&c.Connections, 2)
	def(&c.MaxBatch, 50)
	def(&c.MaxStep, 1_000_000)
	def(&c.LeafdsPerRegion, 1)
	def(&c.ServersPerRegion, 1)
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Second
	}
	if c.GatewayLatency == 0 {
		c.GatewayLatency = 30 * time.Millisecond
	}
	if c.RegionFor == 0 {
		c.RegionFor = 8 * time.Second
	}
	if len(c.Tags) == 0 {
		c.Tags = []string{"a", "b"}
	}
	if len(c.Faults) == 0 {
		c.Faults = RegionFaults
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("%w: rate %d must be 1-100000", ErrConfig, c.Rate)
	case c.Concurrency < c.Regions || c.Connections < 1:
		return fmt.Errorf("%w: concurrency (at least one per region) and connections must be positive", ErrConfig)
	case c.MaxBatch < 2 || c.MaxBatch > 10000:
		return fmt.Errorf("%w: max batch %d must be 2-10000", ErrConfig, c.MaxBatch)
	case c.Timeout < 100*time.Millisecond:
		return fmt.Errorf("%w: timeout %v is under 100ms", ErrConfig, c.Timeout)
	case c.GatewayLatency < 0 || c.GatewayLatency > time.Second:
		return fmt.Errorf("%w: gateway latency %v must be 0-1s", ErrConfig, c.GatewayLatency)
	case c.RegionFor < time.Second || c.RegionFor > 10*time.Minute:
		return fmt.Errorf("%w: region-for %v must be 1s-10m", ErrConfig, c.RegionFor)
	case c.LeafdsPerRegion < 1 || c.LeafdsPerRegion > 2:
		return fmt.Errorf("%w: leafds per region %d must be 1 or 2", ErrConfig, c.LeafdsPerRegion)
	case c.ServersPerRegion != 1 && c.ServersPerRegion != 3:
		return fmt.Errorf("%w: servers per region %d must be 1 or 3", ErrConfig, c.ServersPerRegion)
	case c.Duration < 0:
		return fmt.Errorf("%w: duration %v", ErrConfig, c.Duration)
	}
	for _, t := range c.Tags {
		if _, err := wire.ParseTag(t); err != nil {
			return fmt.Errorf("%w: tag %q", ErrConfig, t)
		}
	}
	for _, f := range c.Faults {
		if !slices.Contains(RegionFaults, f) {
			return fmt.Errorf("%w: fault %q: with --regions want one of %s", ErrConfig, f, strings.Join(RegionFaults, ", "))
		}
	}
	return c.resolvePaths()
}

// gwProxy names the proxy in front of server s of region to's gateway
// port that region from's servers connect through.
func gwProxy(from, to, s int) string { return fmt.Sprintf("gw-%d-%d-%d", from, to, s) }

// natsPorts is one nats-server's ports in the many-regions mode.
type natsPorts struct{ client, mon, route, gateway, dead int }

// regionNATSConf is the configuration of server p of a region's cluster
// named name, whose servers' route ports are routes (a lone server routes
// to itself: JetStream in a super-cluster needs a route): JetStream on,
// and an outbound gateway to each other region through the proxies in gw
// (region name → URLs, one per server of that region). It advertises a
// gateway address nothing listens on (dead): an address learnt by gossip
// would let another region reach it around the proxy that a fault acts
// on; and no client URL, so that leafd stays on the proxies it was given.
//
// Each region's gateways take only its own credentials (gwUser, gwPass),
// and the URLs of a remote carry that region's. A server gossips the URLs
// it has for every region to the servers that connect to it, without
// their credentials: a server that learnt another region's proxy to a
// third region this way (and would reach it around its own proxies, which
// a fault acts on) dials it with its own credentials, is refused, and
// tries the next URL.
func regionNATSConf(name, server string, p natsPorts, routes []int, store string, gw map[string][]string) string {
	var remotes []string
	names := make([]string, 0, len(gw))
	for n := range gw {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		var urls []string
		for _, u := range gw[n] {
			urls = append(urls, strconv.Quote(strings.Replace(u, "://", "://"+gwUser(n)+":"+gwPass(n)+"@", 1)))
		}
		remotes = append(remotes, fmt.Sprintf("    {name: %q, urls: [%s]}", n, strings.Join(urls, ", ")))
	}
	var rs []string
	for _, r := range routes {
		rs = append(rs, strconv.Quote(fmt.Sprintf("nats-route://127.0.0.1:%d", r)))
	}
	return fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 1GB
}
cluster {
  name: %q
  listen: "127.0.0.1:%d"
  routes: [%s]
  no_advertise: true
}
gateway {
  name: %q
  listen: "127.0.0.1:%d"
  advertise: "127.0.0.1:%d"
  authorization { user: %q, password: %q }
  gateways: [
%s
  ]
}
ping_interval: "2s"
ping_max: 3
`, server, p.client, p.mon, store, name, p.route, strings.Join(rs, ", "), name, p.gateway, p.dead, gwUser(name), gwPass(name), strings.Join(remotes, "\n"))
}

// gwUser and gwPass are the credentials region name's gateways take.
func gwUser(name string) string { return "gw-" + name }
func gwPass(name string) string { return "leafchaos-" + name }

// serverName is the name of server s of region r: the region's name when
// it has one server, r<i>-<s> otherwise.
func (rr *regionsRun) serverName(r string, s int) string {
	if rr.cfg.ServersPerRegion == 1 {
		return r
	}
	return fmt.Sprintf("%s-%d", r, s)
}

// startNATS starts ServersPerRegion nats-servers per region, routed into
// the region's cluster, with a proxy in front of each server's gateway
// port per other region (gw-i-j-s: region i's servers to server s of
// region j) carrying GatewayLatency each way, and a proxy in front of
// each server that its leafds reach it through (nats-<server>).
func (rr *regionsRun) startNATS(ctx context.Context) error {
	n, per := rr.cfg.Regions, rr.cfg.ServersPerRegion
	// The proxies listen on ports of the same draw as the servers': one
	// bound on a port the kernel picked could take a server's before
	// that server starts.
	ports, err := freePorts(5*n*per + n*n*per)
	if err != nil {
		return err
	}
	spare := ports[5*n*per:]
	proxyAddr := func() string {
		a := fmt.Sprintf("127.0.0.1:%d", spare[0])
		spare = spare[1:]
		return a
	}
	at := func(i, s int) natsPorts {
		k := 5 * (i*per + s)
		return natsPorts{ports[k], ports[k+1], ports[k+2], ports[k+3], ports[k+4]}
	}
	c := rr.c
	for i := range n {
		r := &region{idx: i, name: fmt.Sprintf("r%d", i), conns: make([]atomic.Pointer[nats.Conn], rr.cfg.Connections),
			gwPorts: map[int]bool{}}
		gw := map[string][]string{}
		for j := range n {
			if j == i {
				continue
			}
			for s := range per {
				listen := proxyAddr()
				addr, err := c.net.addAt(gwProxy(i, j, s), listen, fmt.Sprintf("127.0.0.1:%d", at(j, s).gateway))
				if err != nil {
					return err
				}
				r.gwPorts[portOf(listen)] = true
				gw[fmt.Sprintf("r%d", j)] = append(gw[fmt.Sprintf("r%d", j)], "nats://"+addr)
				if rr.cfg.GatewayLatency > 0 {
					if _, err := c.net.apply(ctx, []string{gwProxy(i, j, s)}, latencyToxics(rr.cfg.GatewayLatency, 0)); err != nil {
						return err
					}
				}
			}
		}
		var leafdURLs []string
		var routePorts []int
		for s := range per {
			routePorts = append(routePorts, at(i, s).route)
		}
		for s := range per {
			p := at(i, s)
			name := rr.serverName(r.name, s)
			dir := filepath.Join(c.dir, "nats", name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			conf := regionNATSConf(r.name, name, p, routePorts, filepath.Join(dir, "js"), gw)
			path := filepath.Join(dir, "nats.conf")
			if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
				return err
			}
			proc := &proc{name: "nats-" + name, bin: rr.cfg.NATSBin, args: []string{"-c", path}, dir: dir,
				logPath: filepath.Join(dir, "nats.log"), onExit: c.onExit}
			addr := fmt.Sprintf("127.0.0.1:%d", p.client)
			r.nats = append(r.nats, proc)
			r.addrs = append(r.addrs, addr)
			r.mons = append(r.mons, fmt.Sprintf("127.0.0.1:%d", p.mon))
			paddr, err := c.net.addAt("nats-"+name, proxyAddr(), addr)
			if err != nil {
				return err
			}
			leafdURLs = append(leafdURLs, "nats://"+paddr)
			c.nats = append(c.nats, proc)
			if err := proc.start(); err != nil {
				return err
			}
		}
		r.leafdURL = strings.Join(leafdURLs, ",")
		rr.rs = append(rr.rs, r)
	}
	for _, r := range rr.rs {
		if err := r.waitUp(ctx); err != nil {
			return err
		}
	}
	return nil
}

// portOf is the port of host:port a.
func portOf(a string) int {
	_, p, _ := strings.Cut(a, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// waitUp waits until each of r's servers takes connections.
func (r *region) waitUp(ctx context.Context) error {
	for s, addr := range r.addrs {
		if err := waitTCP(ctx, addr, readyWait); err != nil {
			return fmt.Errorf("%s: %w\n%s", r.nats[s].name, err, r.nats[s].logTail(20))
		}
	}
	return nil
}

// gatewayz is the part of /gatewayz the harness reads.
type gatewayz struct {
	Outbound map[string]struct {
		Connection *struct {
			Start time.Time `json:"start"`
			Port  int       `json:"port"`
		} `json:"connection"`
	} `json:"outbound_gateways"`
}

// gwConn is one outbound gateway connection: when it connected, and the
// port it connected to.
type gwConn struct {
	start time.Time
	port  int
}

// outbound is the server monitored at mon's outbound gateway connection
// to each region (absent: none).
func outbound(client *http.Client, mon string) map[string]gwConn {
	resp, err := client.Get("http://" + mon + "/gatewayz")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var gz gatewayz
	if err := json.NewDecoder(resp.Body).Decode(&gz); err != nil {
		return nil
	}
	out := map[string]gwConn{}
	for name, g := range gz.Outbound {
		if g.Connection != nil {
			out[name] = gwConn{g.Connection.Start, g.Connection.Port}
		}
	}
	return out
}

// waitGateways waits (bounded by readyWait) until every region's servers
// have an outbound gateway to every other region, and each gateway from
// or to region k (k ≥ 0) connected after since: once a fault has struck,
// the ones made before it are gone (a closed proxy drops them; through a
// blackhole the servers' pings give up on them).
func (rr *regionsRun) waitGateways(ctx context.Context, k int, since time.Time) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyWait)
	for {
		var waiting []string
		for _, r := range rr.rs {
			for s, mon := range r.mons {
				out := outbound(client, mon)
				for _, o := range rr.rs {
					if o == r {
						continue
					}
					g, ok := out[o.name]
					switch {
					case !ok:
						waiting = append(waiting, fmt.Sprintf("%s to %s: none", r.nats[s].name, o.name))
					case (r.idx == k || o.idx == k) && g.start.Before(since):
						waiting = append(waiting, fmt.Sprintf("%s to %s: from before the fault", r.nats[s].name, o.name))
					case !r.gwPorts[g.port]:
						// A gateway around the proxies would carry a
						// region's traffic past the faults.
						waiting = append(waiting, fmt.Sprintf("%s to %s: through port %d, not its own proxies", r.nats[s].name, o.name, g.port))
					}
				}
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("regions: gateways not all up within %v: %s", readyWait, strings.Join(waiting, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metaWait bounds waitMeta: past it the leafds start anyway (they retry
// what needs JetStream's meta leader).
const metaWait = 30 * time.Second

// waitMeta waits (bounded by metaWait) until every server names a
// JetStream meta leader of a group of every server: making a region's
// buckets needs it. It only logs when that does not happen.
func (rr *regionsRun) waitMeta(ctx context.Context) {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(metaWait)
	for {
		all := true
		total := len(rr.rs) * rr.cfg.ServersPerRegion
		for _, mon := range rr.mons() {
			var jsz struct {
				Meta *struct {
					Leader string `json:"leader"`
					Size   int    `json:"cluster_size"`
				} `json:"meta_cluster"`
			}
			resp, err := client.Get("http://" + mon + "/jsz")
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&jsz)
				resp.Body.Close()
			}
			if err != nil || jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size < total {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			rr.c.log.Warn("chaos: no JetStream meta leader seen by every region", "within", metaWait)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mons is every server's monitoring host:port.
func (rr *regionsRun) mons() []string {
	var m []string
	for _, r := range rr.rs {
		m = append(m, r.mons...)
	}
	return m
}

// startLeafds starts LeafdsPerRegion leafds in each region: KV store and
// KV worker ids in the region's own buckets, the region's id and name.
func (rr *regionsRun) startLeafds(ctx context.Context) error {
	c := rr.c
	per := rr.cfg.LeafdsPerRegion
	ports, err := freePorts(per * len(rr.rs))
	if err != nil {
		return err
	}
	for _, r := range rr.rs {
		for k := range per {
			name := fmt.Sprintf("%s-%d", r.name, k+1)
			dir := filepath.Join(c.dir, "leafd", name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[r.idx*per+k])
			args := []string{
				"--name", name,
				"--nats", r.leafdURL,
				"--http", httpAddr,
				"--data", filepath.Join(dir, "data"),
				"--regions", strconv.Itoa(rr.cfg.Regions),
				"--region-id", strconv.Itoa(r.idx),
				"--region", r.name,
				"--auto-create", "true", // a deployment that starts with its regions
				"--worker-registry", "kv",
				"--kv-replicas", strconv.Itoa(rr.cfg.ServersPerRegion),
				"--max-step", strconv.Itoa(rr.cfg.MaxStep),
			}
			p := &proc{name: name, bin: rr.cfg.Leafd, args: args, dir: dir, logPath: filepath.Join(dir, "leafd.log")}
			l := &leafd{proc: p, http: httpAddr, registry: "kv"}
			p.onExit = c.leafdExit(l)
			c.leafds = append(c.leafds, l)
			r.leafds = append(r.leafds, l)
		}
	}
	for _, r := range rr.rs {
		for _, l := range r.leafds {
			took, err := c.startProc(ctx, l, 0, readyWait)
			if err != nil {
				return err
			}
			c.log.Info("chaos: leafd ready", "node", l.name, "took", took.Round(time.Millisecond))
		}
	}
	return nil
}

// urlsFor is region r's servers first (from the k-th on, spreading the
// clients), then the others': a client stays in its region while a
// server of it is up (no randomizing) and fails over to another region's
// servers while none is.
func (rr *regionsRun) urlsFor(r *region, k int) string {
	var u []string
	for s := range r.addrs {
		u = append(u, "nats://"+r.addrs[(k+s)%len(r.addrs)])
	}
	for _, o := range rr.rs {
		if o != r {
			for _, a := range o.addrs {
				u = append(u, "nats://"+a)
			}
		}
	}
	return strings.Join(u, ",")
}

func (rr *regionsRun) dial(r *region, k int) (*nats.Conn, error) {
	return nats.Connect(rr.urlsFor(r, k),
		nats.Name(fmt.Sprintf("leafchaos-%s-client-%d", r.name, k)),
		nats.DontRandomize(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			rr.cfg.Logger.Debug("chaos: region client connection", "region", r.name, "err", err)
		}),
	)
}

// connect opens (or opens again) region r's client connections; the old
// ones close once a request on them has timed out.
func (rr *regionsRun) connect(r *region) error {
	for k := range r.conns {
		nc, err := rr.dial(r, k)
		if err != nil {
			return fmt.Errorf("client connection to %s: %w", r.name, err)
		}
		if old := r.conns[k].Swap(nc); old != nil {
			time.AfterFunc(rr.cfg.Timeout+time.Second, old.Close)
		}
	}
	return nil
}

func (rr *regionsRun) closeConns() {
	for _, r := range rr.rs {
		for k := range r.conns {
			if nc := r.conns[k].Load(); nc != nil {
				nc.Close()
			}
		}
	}
}

// rttResponders answers rttSubject+i on region i's servers, so that a
// probe from another region crosses the gateway links and back.
func (rr *regionsRun) rttResponders() (func(), error) {
	var ncs []*nats.Conn
	stop := func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}
	for _, r := range rr.rs {
		// Only this region's servers: were they down, no one answers.
		nc, err := nats.Connect("nats://"+strings.Join(r.addrs, ",nats://"), nats.Name("leafchaos-rtt-"+r.name), nats.MaxReconnects(-1),
			nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			stop()
			return nil, err
		}
		ncs = append(ncs, nc)
		if _, err := nc.Subscribe(rttSubject+strconv.Itoa(r.idx), func(m *nats.Msg) { _ = m.Respond(nil) }); err != nil {
			stop()
			return nil, err
		}
		if err := nc.Flush(); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// probe asks every region's responder from every region's first client
// connection every regionProbe: the in-region round trip and the
// gateway's.
func (rr *regionsRun) probe(ctx context.Context) {
	tick := time.NewTicker(regionProbe)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var wg sync.WaitGroup
		for _, from := range rr.rs {
			nc := from.conns[0].Load()
			for _, to := range rr.rs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sent := time.Now()
					_, err := nc.Request(rttSubject+strconv.Itoa(to.idx), nil, time.Second)
					rec := rttRec{at: sent.Sub(rr.t0).Nanoseconds(), lat: time.Since(sent).Nanoseconds(),
						from: int8(from.idx), to: int8(to.idx), ok: err == nil}
					rr.mu.Lock()
					rr.rtts = append(rr.rtts, rec)
					rr.mu.Unlock()
				}()
			}
		}
		wg.Wait()
	}
}

// load paces Rate/N requests a second from region r's clients until ctx
// ends: singles and batches of each segment tag and of snowflake.
func (rr *regionsRun) load(ctx context.Context, r *region) {
	n := rr.cfg.Regions
	workers := max(rr.cfg.Concurrency/n, 1)
	rate := max(rr.cfg.Rate/n, 1)
	tokens := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(rr.cfg.Seed), uint64(1000*r.idx+w)))
			var buf []int64
			for range tokens {
				buf = rr.request(r, rng, w, buf[:0])
			}
		}()
	}
	start := time.Now()
	var issued int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		due := int64(time.Since(start).Seconds() * float64(rate))
		for ; issued < due; issued++ {
			select {
			case tokens <- struct{}{}:
			default: // every worker busy: the slot is dropped, not queued
				r.dropped.Add(1)
			}
		}
	}
	close(tokens)
	wg.Wait()
}

// request makes one request from region r's worker w and records it.
func (rr *regionsRun) request(r *region, rng *rand.Rand, w int, buf []int64) []int64 {
	tags := rr.cfg.Tags
	var subject, space string
	count := 1
	x := rng.IntN(100)
	switch {
	case x < 60:
		tag := tags[rng.IntN(len(tags))]
		subject, space = wire.SegmentPrefix+tag, "segment."+tag
	default:
		subject, space = wire.SnowflakeSubject, "snowflake"
	}
	if x%4 == 0 {
		count = 2 + rng.IntN(rr.cfg.MaxBatch-1)
	}
	nc := r.conns[w%len(r.conns)].Load()
	sent := time.Now()
	reply, err := nc.RequestMsg(wire.NewRequest(subject, count, true), rr.cfg.Timeout)
	lat := time.Since(sent)
	rec := reqRec{at: sent.Sub(rr.t0).Nanoseconds(), lat: lat.Nanoseconds(), by: -1}
	if err == nil {
		err = wire.ReplyError(reply)
	}
	if err == nil {
		buf, err = wire.DecodeIDs(buf, reply.Data, true)
		if err == nil && len(buf) == count && positive(buf) {
			rec.ok = true
			if space == "snowflake" {
				rec.by = int8(rr.layout.Decompose(buf[0]).Region)
			} else {
				rec.by = int8(buf[0] % int64(rr.cfg.Regions))
			}
			rr.spaces[space].add(time.Now().UnixNano(), buf)
		}
	}
	rr.mu.Lock()
	rr.recs[r.idx] = append(rr.recs[r.idx], rec)
	rr.mu.Unlock()
	return buf
}

// duplicatesSoFar is the duplicates of every id space up to now.
func (rr *regionsRun) duplicatesSoFar() int64 {
	var d int64
	for _, s := range rr.spaces {
		d += s.checkSoFar().Duplicates
	}
	return d
}

// strike injects fault f on region k and returns once the region is
// whole again (its gateways up, its leafds ready).
func (rr *regionsRun) strike(ctx context.Context, f string, k int) RegionFaultResult {
	r := rr.rs[k]
	res := RegionFaultResult{Fault: f, Region: r.name}
	var proxies []string
	for j := range rr.rs {
		if j != k {
			for s := range rr.cfg.ServersPerRegion {
				proxies = append(proxies, gwProxy(k, j, s), gwProxy(j, k, s))
			}
		}
	}
	from := time.Now()
	res.From = from.Sub(rr.t0)
	var err error
	var healed time.Time
	switch f {
	case FaultRegionCut:
		res.Target = "blackhole on " + strings.Join(proxies, ",")
		var undo func()
		if undo, err = rr.c.net.apply(ctx, proxies, toxicsFor("blackhole", 0)); err == nil {
			sleep(ctx, rr.cfg.RegionFor)
			undo()
		}
		healed = time.Now()
		if err == nil {
			// A gateway connection opened during the cut (its bytes
			// held by the blackhole) completes once the links open:
			// new is anything opened since the cut began.
			err = rr.waitGateways(ctx, k, from)
		}
	case FaultRegionPartition:
		res.Target = "closed " + strings.Join(proxies, ",")
		var heal func() error
		if heal, err = rr.c.net.partition(proxies); err == nil {
			sleep(ctx, rr.cfg.RegionFor)
			err = heal()
		}
		healed = time.Now()
		if err == nil {
			err = rr.waitGateways(ctx, k, from)
		}
	case FaultRegionKill:
		var names []string
		for _, p := range r.nats {
			names = append(names, p.name)
		}
		for _, l := range r.leafds {
			names = append(names, l.name)
			l.kill9()
		}
		res.Target = "kill -9 " + strings.Join(names, ",")
		sleep(ctx, rr.cfg.RegionFor/2)
		res.natsKilled = time.Since(rr.t0)
		for _, p := range r.nats {
			p.kill9()
		}
		sleep(ctx, rr.cfg.RegionFor-rr.cfg.RegionFor/2)
		healed = time.Now()
		for _, p := range r.nats {
			if err == nil {
				err = p.start()
			}
		}
		if err == nil {
			if err = r.waitUp(ctx); err == nil {
				err = rr.waitGateways(ctx, k, healed)
			}
			if err == nil {
				rr.waitMeta(ctx)
			}
		}
		for _, l := range r.leafds {
			if err != nil {
				break
			}
			_, err = rr.c.startProc(ctx, l, 0, readyWait)
		}
		if err == nil {
			// Its clients failed over to another region: back home.
			err = rr.connect(r)
		}
	default:
		err = fmt.Errorf("unknown fault %q", f)
	}
	res.To = healed.Sub(rr.t0)
	res.Recovery = time.Since(healed)
	if err != nil {
		res.Err = firstLine(err.Error())
		rr.c.problem("%s on %s: %v", f, r.name, err)
	}
	return res
}
