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
// ids for while a region is cut or partitioned: neither side needs the
// other, so only the moment of the strike costs anything.
const regionsMinAnswered = 0.9

// region is one region of the many-regions mode: a one-server NATS
// cluster named name, and its leafds.
type region struct {
	idx      int
	name     string
	nats     *proc
	addr     string // the nats-server's client host:port (the harness's clients)
	mon      string // its monitoring host:port
	leafdURL string // the proxy leafd reaches it through
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

	rep := &RegionsReport{Regions: cfg.Regions, LeafdsPerRegion: cfg.LeafdsPerRegion,
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
		sleep(ctx, regionCalm)
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

func gwProxy(from, to int) string { return fmt.Sprintf("gw-%d-%d", from, to) }

// regionNATSConf is region i's nats-server configuration: a cluster of
// one named name (routed to itself: JetStream in a super-cluster needs a
// route), JetStream on, and an outbound gateway to each other region
// through the proxies in gw (name → URL). It advertises a gateway address
// nothing listens on (dead): an address learnt by gossip would let another
// region reach it around the proxy that a fault acts on; and no client
// URL, so that leafd stays on the proxy it was given.
func regionNATSConf(name string, client, mon, route, gateway, dead int, store string, gw map[string]string) string {
	var remotes []string
	names := make([]string, 0, len(gw))
	for n := range gw {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		remotes = append(remotes, fmt.Sprintf("    {name: %q, urls: [%q]}", n, gw[n]))
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
  routes: ["nats-route://127.0.0.1:%d"]
  no_advertise: true
}
gateway {
  name: %q
  listen: "127.0.0.1:%d"
  advertise: "127.0.0.1:%d"
  gateways: [
%s
  ]
}
ping_interval: "2s"
ping_max: 3
`, name, client, mon, store, name, route, route, name, gateway, dead, strings.Join(remotes, "\n"))
}

// startNATS starts one nats-server per region, each with a proxy per
// other region in front of that region's gateway port (gw-i-j: region i's
// outbound gateway to region j) carrying GatewayLatency each way, and a
// proxy its leafds reach it through (nats-r<i>).
func (rr *regionsRun) startNATS(ctx context.Context) error {
	n := rr.cfg.Regions
	ports, err := freePorts(5 * n)
	if err != nil {
		return err
	}
	port := func(i, k int) int { return ports[5*i+k] } // 0 client, 1 monitoring, 2 route, 3 gateway, 4 dead
	c := rr.c
	for i := range n {
		r := &region{idx: i, name: fmt.Sprintf("r%d", i), conns: make([]atomic.Pointer[nats.Conn], rr.cfg.Connections)}
		gw := map[string]string{}
		for j := range n {
			if j == i {
				continue
			}
			addr, err := c.net.add(gwProxy(i, j), fmt.Sprintf("127.0.0.1:%d", port(j, 3)))
			if err != nil {
				return err
			}
			gw[fmt.Sprintf("r%d", j)] = "nats://" + addr
			if rr.cfg.GatewayLatency > 0 {
				if _, err := c.net.apply(ctx, []string{gwProxy(i, j)}, latencyToxics(rr.cfg.GatewayLatency, 0)); err != nil {
					return err
				}
			}
		}
		dir := filepath.Join(c.dir, "nats", r.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := regionNATSConf(r.name, port(i, 0), port(i, 1), port(i, 2), port(i, 3), port(i, 4), filepath.Join(dir, "js"), gw)
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return err
		}
		r.nats = &proc{name: "nats-" + r.name, bin: rr.cfg.NATSBin, args: []string{"-c", path}, dir: dir,
			logPath: filepath.Join(dir, "nats.log"), onExit: c.onExit}
		r.addr = fmt.Sprintf("127.0.0.1:%d", port(i, 0))
		r.mon = fmt.Sprintf("127.0.0.1:%d", port(i, 1))
		addr, err := c.net.add("nats-"+r.name, r.addr)
		if err != nil {
			return err
		}
		r.leafdURL = "nats://" + addr
		c.nats = append(c.nats, r.nats)
		rr.rs = append(rr.rs, r)
		if err := r.nats.start(); err != nil {
			return err
		}
	}
	for _, r := range rr.rs {
		if err := waitTCP(ctx, r.addr, readyWait); err != nil {
			return fmt.Errorf("%s: %w\n%s", r.nats.name, err, r.nats.logTail(20))
		}
	}
	return nil
}

// gatewayz is the part of /gatewayz the harness reads.
type gatewayz struct {
	Outbound map[string]struct {
		Connection *struct {
			Start time.Time `json:"start"`
		} `json:"connection"`
	} `json:"outbound_gateways"`
}

// outbound is when region r's server's outbound gateway to each region
// connected (absent: none).
func outbound(client *http.Client, r *region) map[string]time.Time {
	resp, err := client.Get("http://" + r.mon + "/gatewayz")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var gz gatewayz
	if err := json.NewDecoder(resp.Body).Decode(&gz); err != nil {
		return nil
	}
	out := map[string]time.Time{}
	for name, g := range gz.Outbound {
		if g.Connection != nil {
			out[name] = g.Connection.Start
		}
	}
	return out
}

// waitGateways waits (bounded by readyWait) until every region's server
// has an outbound gateway to every other region, and each gateway from
// or to region k (k ≥ 0) connected after since: a heal's connections
// are new ones (a blackhole's removal and a closed proxy drop the old).
func (rr *regionsRun) waitGateways(ctx context.Context, k int, since time.Time) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyWait)
	for {
		all := true
		for _, r := range rr.rs {
			out := outbound(client, r)
			for _, o := range rr.rs {
				if o == r {
					continue
				}
				at, ok := out[o.name]
				if !ok || ((r.idx == k || o.idx == k) && at.Before(since)) {
					all = false
				}
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("regions: gateways not all up within %v", readyWait)
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

// waitMeta waits (bounded by metaWait) until every region's server names
// a JetStream meta leader of a group of every server: making a region's
// buckets needs it. It only logs when that does not happen.
func (rr *regionsRun) waitMeta(ctx context.Context) {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(metaWait)
	for {
		all := true
		for _, r := range rr.rs {
			var jsz struct {
				Meta *struct {
					Leader string `json:"leader"`
					Size   int    `json:"cluster_size"`
				} `json:"meta_cluster"`
			}
			resp, err := client.Get("http://" + r.mon + "/jsz")
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&jsz)
				resp.Body.Close()
			}
			if err != nil || jsz.Meta == nil || jsz.Meta.Leader == "" || jsz.Meta.Size < len(rr.rs) {
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
				"--kv-replicas", "1",
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

// urlsFor is region r's server first, then the others': a client stays in
// its region while its server is up (no randomizing) and fails over to
// another region's server while it is down.
func (rr *regionsRun) urlsFor(r *region) string {
	u := []string{"nats://" + r.addr}
	for _, o := range rr.rs {
		if o != r {
			u = append(u, "nats://"+o.addr)
		}
	}
	return strings.Join(u, ",")
}

func (rr *regionsRun) dial(r *region, k int) (*nats.Conn, error) {
	return nats.Connect(rr.urlsFor(r),
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

// rttResponders answers rttSubject+i on region i's server, so that a
// probe from another region crosses the gateway links and back.
func (rr *regionsRun) rttResponders() (func(), error) {
	var ncs []*nats.Conn
	stop := func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}
	for _, r := range rr.rs {
		// Only this region's server: were it down, no one answers.
		nc, err := nats.Connect("nats://"+r.addr, nats.Name("leafchaos-rtt-"+r.name), nats.MaxReconnects(-1),
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
			proxies = append(proxies, gwProxy(k, j), gwProxy(j, k))
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
			err = rr.waitGateways(ctx, k, healed)
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
			err = rr.waitGateways(ctx, k, healed)
		}
	case FaultRegionKill:
		res.Target = "kill -9 " + r.nats.name
		for _, l := range r.leafds {
			res.Target += "," + l.name
			l.kill9()
		}
		sleep(ctx, rr.cfg.RegionFor/2)
		res.natsKilled = time.Since(rr.t0)
		r.nats.kill9()
		sleep(ctx, rr.cfg.RegionFor-rr.cfg.RegionFor/2)
		healed = time.Now()
		if err = r.nats.start(); err == nil {
			if err = waitTCP(ctx, r.addr, readyWait); err == nil {
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
