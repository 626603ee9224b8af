package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natsauth"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snownode"
)

// Node is one running leafd.
type Node struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.Clock // Config.Clock
	started time.Time
	start   starting     // what Start waits for, on /readyz
	met     *liveMetrics // request metrics (metrics.go has the collector of the rest)
	events  *events.Publisher
	lock    *dirLock // DataDir/leafd.lock, held while the node runs
	stops   stops    // what Close runs: pushed by Start, one subsystem at a time
	closeMu sync.Mutex
	closed  bool

	ns *server.Server // nil when joining an existing NATS
	nc *nats.Conn
	// dial connects to NATS as nc did, with extra options; the snowflake
	// endpoints take a connection of their own from it at each join
	// (responder.Config.SnowflakeConn).
	dial func(extra ...nats.Option) (*nats.Conn, error)
	// peers is this node among the live nodes: its membership, the
	// floors it hears and answers, the checks against the others.
	peers *peers.Set
	web   web // HTTP: /healthz, /metrics, the API once started

	// Segment ids.
	store  segment.Store
	health storeHealth
	steps  *segment.StepFile
	floors segment.Floors // the engine's, shared with the monotonic leaders
	opaque *opaque.Key    // of opaque tags; nil: refused
	engine *segment.Engine
	prod   *producer.Producer
	pool   *pool.Filler
	mono   atomic.Pointer[monoServer] // leaders of the monotonic tags; nil until started

	sf   *snownode.Server // snowflake ids; nil with --worker-registry off
	resp *responder.Responder
	// probe sends the self-probes; set once before the HTTP API is served.
	probe *prober
}

// web is the node's HTTP server.
type web struct {
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup
	off sync.Once
	api atomic.Pointer[http.Handler] // the HTTP API, once started
	reg *prometheus.Registry         // /metrics
}

// Start builds and starts a node. On error everything started so far is
// stopped again.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkVersion(buildinfo.Version); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	n := &Node{
		cfg:    cfg,
		log:    log.With("node", cfg.Name),
		clock:  clock.Or(cfg.Clock),
		met:    newLiveMetrics(),
		health: storeHealth{fails: map[string]storeFail{}},
	}
	n.started = n.clock.Now()
	defer func() {
		if err != nil {
			_ = n.Close(context.Background())
		}
	}()
	n.start.set("starting", nil)
	// Two nodes on one data directory refuse at once. A directory that
	// cannot be written at all only costs a node on an external NATS its
	// hints (the embedded server cannot start without it anyway).
	store := "" // the embedded nats-server's JetStream directory
	if cfg.NATS.URL == "" {
		store = filepath.Join(cfg.DataDir, "jetstream")
	}
	n.stops.push("data directory lock", func(context.Context) error { return n.lock.Close() }) // last: everything that wrote to DataDir has stopped
	if n.lock, err = lockDataDir(cfg.DataDir, store, cfg.Name); err != nil {
		if errors.Is(err, ErrDataDirInUse) || cfg.NATS.URL == "" {
			return nil, err
		}
		n.log.Warn("running without a data directory lock", "err", err)
	}
	instance := peers.NewInstance()
	prev := n.lock.takeOver(instance) // dead: its members key goes at the join
	// Live at once, ready once started: a backend that does not answer yet
	// (NATS itself, a NATS cluster electing its JetStream leader, a
	// database starting beside leafd) is waited for, not fatal.
	n.stops.push("http", n.stopHTTP)
	if err := n.startHTTP(); err != nil {
		return nil, err
	}
	n.stops.push("embedded nats-server", n.stopServer)
	n.stops.push("nats", n.drainNATS)
	if err := n.await(ctx, "connecting to NATS", func(context.Context) error { return n.startNATS() }); err != nil {
		return nil, err
	}
	n.events = events.New(events.Config{Node: cfg.Name, Publish: n.nc.Publish, Clock: n.clock, Logger: n.log})
	// The floors are a guard against a store that goes back (issue #12):
	// a floor file that cannot be read stops the node, unless the node
	// runs without a data directory (see above).
	var floors segment.Floors
	ff, err := segment.OpenFloorFile(filepath.Join(cfg.DataDir, floorFileName))
	switch {
	case err == nil:
		floors = ff
	case n.lock == nil:
		n.log.Warn("segment: tag floors kept in memory only", "err", err)
	default:
		return nil, err
	}
	var own func() map[string]int64
	var ownModes func() map[string]string
	if floors != nil {
		own, ownModes = ff.All, ff.Modes
	} else {
		floors = segment.NewMemFloors()
	}
	n.floors = floors
	if n.peers, err = peers.New(peers.Config{
		Conn:      n.nc,
		Name:      cfg.Name,
		Instance:  instance,
		Clock:     n.clock,
		Log:       n.log,
		Replicas:  cfg.Store.KVReplicas,
		OwnServer: n.ns != nil,
		Status:    n.startingStatus,
		Floor:     floors.Floor,
	}); err != nil {
		return nil, err
	}
	// Before the node answers anyone: a starting node's status names the
	// snowflake layout and the worker id it registers.
	if err := n.newSnowflake(); err != nil {
		return nil, err
	}
	// Answering its status and its floors from before it is a member: a
	// node restarting with ranges of a tag (its floor file, or loads from
	// engine.Start on) answers leaf.admin.floor.<tag> before its responder
	// runs, and its record says so (Serving), so a newcomer's auto-create
	// waits for it (TestRestartingNodeFloorsHeard); nodes that start at
	// the same moment see each other's name and worker-id claim.
	n.stops.push("peers", n.peers.Close)
	if err := n.peers.Start(ctx); err != nil {
		return nil, err
	}
	// Tried again while JetStream does not answer (a cluster electing its
	// leader, the bucket's server restarting): a node that gave up would
	// stay no member for good, and slow answers of its would go unheard.
	// Only a NATS without JetStream leaves the node without members.
	if err := n.await(ctx, "joining the live nodes (leaf_nodes)", func(ctx context.Context) error { return n.peers.Join(ctx, prev) }); err != nil {
		return nil, err
	}
	// Independent checks run together: the name check, the snowflake
	// worker's registration (its own checks against the live nodes) and
	// the segment store with the live nodes' floors each wait for every
	// member's answer, and none needs another's result. Nothing is served
	// before all have passed (the responder starts below), and the tags
	// load only once the name check passed, so a process refused for its
	// name reserves no range. Stopping waits for every branch.
	n.stops.push("snowflake", func(context.Context) error { return n.sf.Close() })
	bctx, cancelBranches := context.WithCancel(ctx)
	defer cancelBranches()
	branch := func(phase string, step func(context.Context) error) <-chan error {
		done := make(chan error, 1)
		go func() { done <- n.await(bctx, phase, step) }()
		return done
	}
	nameDone := branch("checking the name against the live nodes", n.checkName)
	sfDone := branch("registering a snowflake worker", n.startSnowflake)
	var nameErr, sfErr error
	nameIn, sfIn := false, false // the branch's result is in
	waitName := func() error {
		if !nameIn {
			nameErr, nameIn = <-nameDone, true
		}
		return nameErr
	}
	waitAll := func() error {
		if !sfIn {
			sfErr, sfIn = <-sfDone, true
		}
		return errors.Join(waitName(), sfErr)
	}
	// snowflakeFailed is the snowflake branch's error if it ended with one.
	snowflakeFailed := func() error {
		if !sfIn {
			select {
			case sfErr = <-sfDone:
				sfIn = true
			default:
			}
		}
		return sfErr
	}
	// fail stops the branches still running after err and returns the
	// error to fail the start with: a refused name's, whatever else was
	// met meanwhile, else err.
	fail := func(err error) error {
		cancelBranches()
		_ = waitAll()
		if nameErr != nil && !errors.Is(nameErr, context.Canceled) {
			return nameErr
		}
		return err
	}
	n.stops.push("segment store", func(context.Context) error {
		if n.store == nil {
			return nil
		}
		return n.store.Close()
	})
	if err := n.await(bctx, "opening the segment store", func(ctx context.Context) error { return stores[n.storeKind()](n, ctx) }); err != nil {
		return nil, fail(err)
	}
	// The steps are hints: a data directory that cannot be written costs
	// them, not the node.
	var steps segment.Steps
	sf, err := segment.OpenStepFileClock(filepath.Join(cfg.DataDir, stepFileName), n.log, n.clock)
	switch {
	case sf == nil:
		n.log.Warn("segment: running without remembered steps", "err", err)
	case err != nil:
		n.log.Warn("segment: remembered steps lost", "err", err)
	}
	if sf != nil {
		n.steps, steps = sf, sf
		n.stops.push("segment steps", closer(sf))
	}
	err = n.await(bctx, "asking the live nodes for their floors", func(ctx context.Context) error {
		inc, err := n.incarnation(ctx)
		if err != nil {
			return err
		}
		return n.peers.HearFloors(ctx, peers.Floors{Store: inc, All: own, Modes: ownModes, MaxTags: cfg.Store.MaxTags})
	})
	if err != nil {
		return nil, fail(err)
	}
	// From now on a reconnect to NATS gathers the live nodes' floors
	// again: announcements sent while this node was away never reach it
	// (peers.Set.Reconnected).
	n.nc.SetReconnectHandler(func(nc *nats.Conn) {
		n.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		n.peers.Reconnected()
	})
	// The tags load once the name passed (a refused process reserves no
	// range) and while the snowflake branch has not failed.
	if err := waitName(); err != nil {
		return nil, fail(err)
	}
	if err := snowflakeFailed(); err != nil {
		return nil, fail(err)
	}
	if n.opaque, err = cfg.Store.opaqueKey(); err != nil {
		return nil, fail(err)
	}
	if n.opaque != nil {
		n.log.Info("opaque tags: key loaded", "key_id", n.opaque.ID())
	}
	n.engine, err = segment.New(segment.Config{
		Opaque:      n.opaquePerm,
		PeerFloor:   n.peers.Floor,
		PeerMode:    n.peers.Mode,
		CreateCheck: n.createCheck,
		Floors:      floors,
		Steps:       steps,
		Store:       n.store,
		AutoCreate:  cfg.Store.AutoCreates(),
		DefaultStep: cfg.Store.DefaultStep,
		Logger:      n.log,
		OnLoad:      n.onLoad,
		Announce:    n.peers,
		MaxTags:     cfg.Store.MaxTags,
		MaxStep:     cfg.Store.MaxStep,
		Clock:       n.clock,
	})
	if err != nil {
		return nil, fail(err)
	}
	n.stops.push("segment engine", closer(n.engine))
	if err := n.await(bctx, "loading the tags", n.engine.Start); err != nil {
		return nil, fail(fmt.Errorf("segment engine: %w", err))
	}
	n.prod, err = producer.New(producer.Config{Segments: n.engine, Logger: n.log, OnEmpty: n.onEmpty, Clock: n.clock})
	if err != nil {
		return nil, fail(err)
	}
	n.stops.push("producer", func(ctx context.Context) error {
		n.peers.StopFloors() // before the hand-back: no node may learn this node's floors now
		n.handBack(ctx)
		return n.prod.Close()
	})
	n.prod.Preload()
	if err := waitAll(); err != nil {
		return nil, err
	}
	cancelBranches()
	// Without JetStream (no members), the name once more, seconds after
	// the first check: in a NATS cluster a starting node's subscription
	// reaches the other servers a route's latency later, and two nodes
	// started together on two servers can both miss it in their windows
	// (even with 10 ms routes). A member needs no second
	// check: of two nodes started together, the one that lists the members
	// second waits for the other's answer, asking again every second
	// until its subscription has reached every server.
	if !n.peers.Members() {
		if err := n.await(ctx, "checking the name against the live nodes", n.checkName); err != nil {
			return nil, err
		}
	}
	rc := responder.Config{
		Conn:      n.nc,
		IDs:       n.prod,
		Store:     n.store,
		Node:      cfg.Name,
		Instance:  n.peers.Instance(),
		Version:   buildinfo.Version,
		MaxBatch:  cfg.MaxBatch,
		Logger:    n.log,
		Layout:    n.sf.Layout(),
		Clock:     n.clock,
		Observe:   n.met.observe,
		Status:    n.status,
		Floor:     n.engine.Floor,
		PeerFloor: n.peers.HighestFloor,
		Opaque:    n.opaque,
	}
	if n.sf != nil { // leaf.admin.time answers the snowflake clock
		rc.Clock = n.sf.Clock()
		rc.Snowflake = n.sf.Ring()
		rc.SnowflakeConn = n.snowflakeConn
	}
	n.resp, err = responder.Start(rc)
	if err != nil {
		return nil, err
	}
	n.stops.push("responder", func(context.Context) error { return n.resp.Stop() })
	// Stopping, the node leaves the members first: the others stop
	// waiting for its answers before it stops giving them.
	n.stops.push("members", n.peers.Leave)
	if err := n.peers.Started(ctx); err != nil {
		return nil, err
	}
	if err := n.sf.Serve(n.resp); err != nil {
		return nil, err
	}
	n.stops.push("snowflake state", func(context.Context) error { n.sf.Stop(); return nil })
	n.stops.push("batch pool", func(context.Context) error {
		if n.pool == nil {
			return nil
		}
		return n.pool.Close()
	})
	if err := n.await(ctx, "starting the batch pool", n.startPool); err != nil {
		return nil, err
	}
	// Leases released while NATS is up: others take over at once.
	n.stops.push("monotonic tags", func(context.Context) error { n.mono.Load().close(); return nil })
	if err := n.await(ctx, "starting the monotonic tags", n.startMono); err != nil {
		return nil, err
	}
	n.startProber()
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	n.warnUnreplicated(wctx)
	cancel()
	n.stops.push("http", n.stopHTTP) // first: a stopping node answers no status
	if err := n.serveAPI(); err != nil {
		return nil, err
	}
	n.stops.push("goodbye", func(context.Context) error { // say goodbye while NATS is still up
		n.events.Emit(events.Event{Kind: events.NodeDown, Message: "leafd stopping"})
		return nil
	})
	n.events.Emit(events.Event{Kind: events.NodeUp, Message: "leafd " + buildinfo.Version + " started",
		Fields: map[string]any{"version": buildinfo.Version, "store": n.storeKind(), "worker_registry": cfg.Registry.Kind,
			"worker": n.snowflakeWorker(), "nats": n.ClientURL()}})
	n.log.Info("leafd started", "nats", n.ClientURL(), "http", n.HTTPAddr(), "store", n.storeKind(),
		"auto_create", cfg.Store.AutoCreates(), "tags", len(n.engine.Tags()), "worker_registry", cfg.Registry.Kind,
		"worker", n.snowflakeWorker())
	return n, nil
}

func (n *Node) storeKind() string {
	if n.cfg.Store.MySQL != "" {
		return storeMySQL
	}
	return storeKV
}

// natsConnectTimeout bounds one connection's handshake to NATS.
const natsConnectTimeout = 10 * time.Second

// A connection whose server has not answered pingsOut pings sent every
// pingEvery is given up as stale and made again (to another server of a
// cluster): a link that swallows bytes, or a frozen server, is otherwise
// noticed only by nats.go's default pings, after minutes in which the
// node says it is ready and NATS routes requests to it that nobody
// answers. A ping every few seconds costs nothing next to the requests.
const (
	pingEvery = 5 * time.Second
	pingsOut  = 2
)

func (n *Node) startNATS() error {
	url := n.cfg.NATS.URL
	opts := []nats.Option{
		nats.Name(n.cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// The handshake is three trips one way: nats.go's 2 s default
		// leaves a node 0.7 s from NATS unable to connect, or to reconnect
		// once it lost its server.
		nats.Timeout(natsConnectTimeout),
		nats.PingInterval(pingEvery),
		nats.MaxPingsOutstanding(pingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				n.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { n.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	if url == "" && n.ns != nil { // an earlier attempt started the server
		url = n.ns.ClientURL()
		opts = append(opts, nats.InProcessServer(n.ns))
	} else if url == "" {
		host, portStr, _ := net.SplitHostPort(n.cfg.NATS.Listen)
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return fmt.Errorf("%w: nats-listen port %q", ErrConfig, portStr)
		}
		if port == 0 {
			port = server.RANDOM_PORT // as for --http: 0 picks a free port (nats-server reads 0 as 4222)
		}
		ns, err := server.NewServer(&server.Options{
			ServerName: n.cfg.Name,
			Host:       host,
			Port:       port,
			JetStream:  true,
			StoreDir:   filepath.Join(n.cfg.DataDir, "jetstream"),
			// Every range reservation, worker lease and taken pool batch
			// an id depends on is fsynced before the server acknowledges
			// it: a power cut must not roll max_id or a lease back
			// (DESIGN invariant 2). The default syncs every 2 minutes.
			SyncAlways: true,
			// As the deploy configs: a stuck client (a frozen leafd
			// joined to this server) loses its subscriptions within
			// seconds, not the default two minutes.
			PingInterval: pingEvery,
			MaxPingsOut:  pingsOut,
			NoSigs:       true,
			NoLog:        true,
		})
		if err != nil {
			return fmt.Errorf("embedded nats-server: %w", err)
		}
		// Its debug output only where leafd logs debug (trace never: a line
		// per protocol message).
		ns.SetLoggerV2(natsLogger{n.log}, n.log.Enabled(context.Background(), slog.LevelDebug), false, false)
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			ns.Shutdown()
			return fmt.Errorf("embedded nats-server did not start on %s (is the port taken?)", n.cfg.NATS.Listen)
		}
		n.ns = ns
		url = ns.ClientURL()
		opts = append(opts, nats.InProcessServer(ns))
	}
	if !n.cfg.NATS.Auth.IsZero() {
		auth, err := n.cfg.NATS.Auth.Options()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		opts = append(opts, auth...)
	}
	n.dial = func(extra ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append(slices.Clip(opts), extra...)...)
	}
	nc, err := n.dial()
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", natsauth.RedactURL(url), err)
	}
	n.nc = nc
	return nil
}

// snowflakeConn is the connection of one membership of the snowflake queue
// group (responder.Config.SnowflakeConn). It connects even while NATS is
// away, as a node whose claim is confirmed serves its ring then too, and
// logs nothing of its own: nc reports the state of NATS.
func (n *Node) snowflakeConn() (*nats.Conn, error) {
	return n.dial(nats.Name(n.cfg.Name+" snowflake"), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(nil), nats.ReconnectHandler(nil))
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
		buildInfoCollector(n.cfg.Name))
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api := n.web.api.Load(); api != nil {
			(*api).ServeHTTP(w, r)
			return
		}
		http.Error(w, "not ready: "+n.start.why(), http.StatusServiceUnavailable)
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
	n.start.set("", nil)
	if n.web.srv == nil {
		return nil
	}
	n.web.reg.MustRegister(newCollector(n))
	n.met.register(n.web.reg)
	api, err := n.httpAPI()
	if err != nil {
		return err
	}
	n.web.api.Store(&api)
	return nil
}

// ClientURL is the NATS URL the node is connected to.
func (n *Node) ClientURL() string {
	if n.ns != nil {
		return n.ns.ClientURL()
	}
	if n.nc != nil {
		return n.nc.ConnectedUrlRedacted()
	}
	return ""
}

// HTTPAddr is the address the HTTP port listens on, or "".
func (n *Node) HTTPAddr() string {
	if n.web.ln == nil {
		return ""
	}
	return n.web.ln.Addr().String()
}

// Server is the embedded nats-server, or nil.
func (n *Node) Server() *server.Server { return n.ns }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// SegmentFloor is the highest range end this node received for tag (what
// it answers on leaf.admin.floor.<tag>), 0 if none.
func (n *Node) SegmentFloor(tag string) int64 { return n.engine.Floor(tag) }

// Close stops the node gracefully, in the reverse order of its start (the
// stop stack, stops): say goodbye, stop HTTP and the monotonic leaders,
// leave the queue groups and finish in-flight requests, hand back what was
// reserved and not served, stop engine and store, drain NATS, stop the
// embedded server, unlock the data directory. Idempotent.
func (n *Node) Close(ctx context.Context) error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	err := n.stops.run(ctx)
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

// drainNATS drains the node's connection (its subscriptions finish what
// they hold), closing it when that takes longer than ctx allows.
func (n *Node) drainNATS(ctx context.Context) error {
	if n.nc == nil {
		return nil
	}
	closed := make(chan struct{})
	n.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := n.nc.Drain(); err != nil {
		n.nc.Close()
		return nil
	}
	select {
	case <-closed:
	case <-ctx.Done():
		n.nc.Close()
	}
	return nil
}

// stopServer stops the embedded nats-server, if there is one.
func (n *Node) stopServer(context.Context) error {
	if n.ns != nil {
		n.ns.Shutdown()
		n.ns.WaitForShutdown()
	}
	return nil
}

func (n *Node) snowflakeWorker() int64 {
	if src := n.sf.Source(); src != nil {
		return src.Worker()
	}
	return -1
}

// opaquePerm is the engine's Config.Opaque: an opaque tag's permutation
// under this node's key, refused when the tag was created with another
// key (its ids would be another permutation's, which could repeat ids).
func (n *Node) opaquePerm(tag string, m segment.Mode) (segment.Permuter, error) {
	switch {
	case n.opaque == nil:
		return nil, fmt.Errorf("node %s has no opaque key (--opaque-key-file or LEAF_OPAQUE_KEY); the tag was created with key %s", n.cfg.Name, m.KeyID)
	case n.opaque.ID() != m.KeyID:
		return nil, fmt.Errorf("the tag was created with key %s, node %s has key %s", m.KeyID, n.cfg.Name, n.opaque.ID())
	}
	return n.opaque.Perm(tag, m.Width)
}
