package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natsconn"
	"github.com/leafmq/leafmq/metrics"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/responder"
)

// startPhase is one step of Start. Its stop, if any, is pushed on the stop
// stack before its start runs, so a start that fails halfway is undone by
// Close, which runs the stops in the reverse order. A phase with await set
// is retried through await while it fails for a transient reason, /readyz
// naming it await meanwhile; any other phase's error fails the start.
type startPhase struct {
	name  string                      // the stop's, in Close's errors
	stop  func(context.Context) error // nil: nothing to stop
	start func(context.Context) error // nil: nothing to start
	await string                      // "": tried once
}

// Start builds and starts a node. On error everything started so far is
// stopped again.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if v := buildinfo.Version; !buildinfo.ValidVersion(v) { // NATS micro would refuse it later, less clearly
		return nil, fmt.Errorf("%w: leafd was built with version %q, which is not SemVer (build with scripts/build.sh)", config.ErrConfig, v)
	}
	if log == nil {
		log = slog.Default()
	}
	n := &Node{
		cfg:   cfg,
		log:   log.With("node", cfg.Name),
		clock: clock.Or(cfg.Clock),
		met:   metrics.NewLive(),
		life:  life{failed: make(chan error, 1)},
	}
	n.start.At = n.clock.Now()
	ctx, n.life.stopStart = context.WithCancelCause(ctx) // fail ends a start under way
	n.conn = natsconn.New(natsconn.Options{Name: cfg.Name, URL: cfg.NATS.URL, Listen: cfg.NATS.Listen,
		DataDir: cfg.DataDir, Auth: cfg.NATS.Auth, Logger: n.log, Clock: n.clock, ErrConfig: config.ErrConfig})
	defer func() {
		if err != nil {
			_ = n.Close(context.Background())
		}
	}()
	b := &boot{Node: n}
	// Live at once (HTTP), ready once started: a backend that does not
	// answer yet (NATS itself, a NATS cluster electing its JetStream
	// leader, a database starting beside leafd) is waited for, not fatal.
	// The stops run bottom up: the goodbye while NATS is still up, HTTP
	// first (a stopping node answers no status), the members left before
	// the responder stops answering, the data directory unlocked last.
	if err := n.runPhases(ctx, []startPhase{
		{name: "data directory lock", stop: func(context.Context) error { return n.life.lock.Close() }, start: b.lockDir},
		{name: "http", stop: n.stopHTTP, start: func(context.Context) error { return n.startHTTP() }},
		{name: "embedded nats-server", stop: func(context.Context) error { n.conn.Shutdown(); return nil }},
		{name: "nats", stop: n.conn.Drain, start: func(context.Context) error { return n.conn.Connect() }, await: "connecting to NATS"},
		{name: "nats round trip", stop: func(context.Context) error { n.conn.StopRTT(); return nil },
			start: func(context.Context) error { n.conn.StartRTT(); return nil }},
		{name: "events", start: n.newEvents},
		{name: "tag floors", start: b.openFloors},
		// The region's name, before anything that uses its scope.
		{name: "region", stop: func(context.Context) error { n.life.region.Close(); return nil }, start: b.startRegion},
		{name: "live nodes", start: b.newPeers},
		{name: "slow node", start: func(context.Context) (err error) { // out of the queue groups while a faster one serves
			n.serve.yield, err = responder.NewSlowYield(responder.SlowYieldConfig{Conn: n.conn.NC(), Scope: n.scope(), RTT: n.conn.SteadyRTT,
				MaxRTT: n.cfg.NATS.MaxRTT, Instance: n.peers.Instance(), Clock: n.clock, Logger: n.log, Events: n.events})
			return err
		}},
		// Before the node answers anyone: a starting node's status names
		// the snowflake layout and the worker id it registers.
		{name: "snowflake layout", start: func(context.Context) error { return n.newSnowflake() }},
		{name: "peers", stop: n.closePeers, start: n.startPeers},
		{name: "membership", start: b.joinPeers, await: "joining the live nodes (leaf_nodes)"},
		{name: "start checks", start: b.startChecks}, // the name, the snowflake worker, the segments
		{name: "name recheck", start: n.recheckName},
		{name: "responder", stop: n.stopResponder, start: n.startResponder},
		{name: "members", stop: n.leavePeers, start: n.startedPeers},
		{name: "snowflake state", stop: n.stopSnowflake, start: n.serveSnowflake},
		{name: "segment queue group", stop: func(context.Context) error { n.serve.segKeep.Close(); return nil },
			start: func(context.Context) error { n.serve.segKeep = n.serve.yield.KeepSegment(n.serve.resp); return nil }},
		{name: "batch pool", stop: n.stopPool, start: n.startPool, await: "starting the batch pool"},
		// Leases released while NATS is up: others take over at once.
		{name: "monotonic tags", stop: n.stopMono, start: n.startMono, await: "starting the monotonic tags"},
		{name: "self-probes", start: n.startProbes},
		{name: "http", stop: n.stopHTTP, start: func(context.Context) error { return n.serveAPI() }},
		{name: "goodbye", stop: n.sayGoodbye, start: n.announceStarted},
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// runPhases runs phases in order, each stop pushed before its start; the
// first error ends it. A start ended by fail (ctx's cause) returns that
// cause, first, from the phase under way or before the next one.
func (n *Node) runPhases(ctx context.Context, phases []startPhase) (err error) {
	for _, p := range phases {
		if p.stop != nil {
			n.life.stops.push(p.name, p.stop)
		}
		switch {
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		case p.start == nil:
		case p.await != "":
			err = n.await(ctx, p.await, p.start)
		default:
			err = p.start(ctx)
		}
		if err != nil {
			if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
				err = errors.Join(c, err) // why the start was ended, first
			}
			return err
		}
	}
	return nil
}

// startResponder serves the node's ids on NATS.
func (n *Node) startResponder(context.Context) error {
	cfg := n.cfg
	rc := responder.Config{
		Conn:      n.conn.NC(),
		IDs:       n.seg.prod,
		Store:     n.seg.store,
		Node:      cfg.Name,
		Instance:  n.peers.Instance(),
		Version:   buildinfo.Version,
		MaxBatch:  cfg.MaxBatch,
		Logger:    n.log,
		Layout:    n.serve.sf.Layout(),
		Clock:     n.clock,
		Observe:   n.met.Observe,
		Status:    n.status,
		Scope:     n.scope(),
		Floor:     n.seg.engine.Floor,
		PeerFloor: n.peers.HighestFloor,
		Opaque:    n.seg.opaque,
		Regions:   n.regions(),
		// A tag created or restarted through any node serves here at
		// once, not once the engine's memory of its absence expires.
		TagChanged: n.seg.engine.Forget,
		TellTag:    n.peers.Tell, // and before the create replies
		Homes: region.NewHomes(region.HomesConfig{Conn: n.conn.NC(), Count: cfg.Region.Count, ID: cfg.Region.ID,
			Region: cfg.Region.Name, Node: cfg.Name, Store: n.seg.store,
			MonoFloor: region.MonoFloor(n.seg.floors, n.peers.Floor, n.peers.Mode),
			Leader:    func(ctx context.Context, tag string) (string, error) { return n.seg.mono.Load().Holder(ctx, tag) }}),
	}
	if n.serve.sf != nil { // leaf.admin.time answers the snowflake clock
		rc.Clock = n.serve.sf.Clock()
		rc.Snowflake = n.serve.sf.Ring()
		rc.SnowflakeConn = func() (*nats.Conn, error) { return n.conn.DialMember("snowflake") }
	}
	rc.SegmentConn = func() (*nats.Conn, error) { return n.conn.DialMember("segment") }
	var err error
	n.serve.resp, err = responder.Start(rc)
	return err
}

func (n *Node) stopResponder(context.Context) error {
	if n.serve.resp == nil {
		return nil
	}
	return n.serve.resp.Stop()
}

// startHTTP listens and serves /healthz (alive), /metrics and pprof at
// once; every other path, /readyz among them, answers 503 with what the
// node waits for until serveAPI.
func (n *Node) startHTTP() error {
	if n.cfg.HTTP.Addr == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", n.cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	n.web.reg = prometheus.NewRegistry()
	n.web.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.BuildInfo(n.cfg.Name))
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api := n.web.api.Load(); api != nil {
			(*api).ServeHTTP(w, r)
			return
		}
		http.Error(w, "not ready: "+n.start.Why(), http.StatusServiceUnavailable)
	})) // Leaf's HTTP API, /readyz, the status page
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("/metrics", promhttp.HandlerFor(n.web.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	n.web.ln = ln
	n.web.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	n.web.wg.Add(1)
	go func() {
		defer n.web.wg.Done()
		if err := n.web.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// serveAPI puts the started node's metrics and HTTP API behind startHTTP's
// listener: from now on /readyz tells the node's health.
func (n *Node) serveAPI() error {
	n.start.Done()
	if n.web.srv == nil {
		return nil
	}
	n.web.reg.MustRegister(n.collector())
	n.met.Register(n.web.reg)
	api, err := n.httpAPI()
	if err != nil {
		return err
	}
	n.web.api.Store(&api)
	return nil
}

// Close stops the node gracefully, in the reverse order of its start (the
// stop stack, stops): say goodbye, stop HTTP and the monotonic leaders,
// leave the queue groups and finish in-flight requests, hand back what was
// reserved and not served, stop engine and store, drain NATS, stop the
// embedded server, unlock the data directory. Idempotent.
func (n *Node) Close(ctx context.Context) error {
	n.life.mu.Lock()
	defer n.life.mu.Unlock()
	if n.life.closed {
		return nil
	}
	n.life.closed = true
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	err := n.life.stops.run(ctx)
	n.log.Info("leafd stopped")
	return err
}

// stopHTTP shuts the HTTP server down, once.
func (n *Node) stopHTTP(ctx context.Context) error {
	var err error
	n.web.off.Do(func() {
		if n.web.srv != nil {
			err = n.web.srv.Shutdown(ctx)
			n.web.wg.Wait()
		}
	})
	return err
}
