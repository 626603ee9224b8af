package snownode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// ErrConfig: the configuration cannot serve snowflake ids, and trying
// again will not help (another layout than the recorded one or the live
// nodes', an epoch after the present).
var ErrConfig = errors.New("config")

// Config is what a Server needs of its node. The funcs that ask the live
// nodes may be nil: nobody is asked.
type Config struct {
	Name     string           // the node's name: its own answer to the clock watch is skipped
	Registry string           // the worker registry's name (--worker-registry), in the status and checked against the live nodes'
	Layout   snowflake.Layout // checked against the data directory's record and the live nodes' layouts
	// Region is the node's region id (snowflake.SourceConfig.Region),
	// 0..Layout.MaxRegion(): Open's registry hands out the workers of
	// this region, and the worker ids of the status, the events and the
	// questions to the live nodes are the ids' worker fields.
	Region  int64
	DataDir string // the layout's record and the lease files are under DataDir/snowflake
	// LeaseFiles is the prefix of the registry's lease files in
	// DataDir/snowflake (snowflake.NewLeaseFiles), "" if it keeps none:
	// the worker ids this data directory held before a restart, with
	// their last leases, are reported among the past ones, so that a
	// node that gets one of them (its records erased) starts above them.
	LeaseFiles string
	// Open opens the registry: at start, again if the worker id was
	// refused, and after each lost claim (snowflake.SourceConfig.Open).
	Open func(context.Context) (snowflake.Registry, error)

	Clock   clock.Clock // the node's: the timers, and the present of past leases in the status; real when nil
	IDClock clock.Clock // the ids' clock: Clock, unless a fault drill offsets its readings

	LeaseAhead, MaxBackward, MaxStartWait time.Duration // snowflake.SourceConfig's
	Ring                                  int           // the ring's size
	LayoutWarn                            time.Duration // an error event when the layout runs out of time bits sooner
	// PeerClockMax refuses a start whose clock is further off the live
	// nodes' average, and makes an error event when a serving node's is
	// (0: not checked at start, nor the start's clock skew assumed).
	PeerClockMax   time.Duration
	PeerClockEvery time.Duration // how often a serving node measures the offset again; 30 s when 0
	// WorkerCountEvery is how often a node counts the worker ids its
	// region's registry holds (WorkerIDs); 30 s when 0.
	WorkerCountEvery time.Duration

	// Peers gathers the status of the live nodes other than this
	// process, waiting for every member: an error fails the attempt (a
	// member that did not answer may serve another layout), no error
	// and none checks against no one.
	Peers func(context.Context) ([]wire.NodeStatus, error)
	// Holder, Lease and NewWorker are snowflake.SourceConfig's Holder,
	// PeerLease and NewWorker. This node's claim is in its status before
	// Holder is asked.
	Holder    func(ctx context.Context, worker int64) (string, error)
	Lease     func(ctx context.Context, worker int64) (time.Time, error)
	NewWorker func(ctx context.Context, worker int64) bool
	// Clocks measures the live nodes' clocks against now at start.
	Clocks func(ctx context.Context, now func() time.Time) (ask.PeerClock, error)
	// Conn is the node's NATS connection, on which a serving node
	// measures its peers' clocks every PeerClockEvery.
	Conn *nats.Conn
	// Scope is the node's region: the peers' clocks it measures are its
	// region's nodes' (wire.Scope.Time).
	Scope wire.Scope
	// Yield, if set, reports whether the node stays out of the snowflake
	// queue group although its Source serves: its round trip to NATS is
	// above --max-nats-rtt while another live node that is not slow serves
	// snowflake, so its answers would reach clients later than that
	// node's. Asked at each change of state and every second; it must
	// return within a few seconds. Nil: never.
	Yield func(ctx context.Context) bool

	Events *events.Publisher
	Logger *slog.Logger
}

// Group is the snowflake queue group (responder.Responder).
type Group interface {
	SetSnowflake(join bool) error
	SnowflakeService() micro.Service // nil while out of the group
}

// Server is a node's snowflake: the Source and its ring, the states they
// went through, and what the node knows of its worker ids.
type Server struct {
	cfg Config
	log *slog.Logger

	// Set by Start, before the node reads them.
	src      *snowflake.Source
	ring     *producer.Snowflake
	states   chan snowflake.State // the Source's states, for apply
	diskPast map[int64]time.Time  // worker ids of this data directory's lease files

	// Set by Serve.
	group  Group
	stop   chan struct{}
	ctx    context.Context // ends at Stop: bounds Yield
	cancel context.CancelFunc
	wg     sync.WaitGroup

	claim       atomic.Int64 // worker id of the last registration (-1: none); in the status from before the peers are asked
	held        atomic.Bool  // a worker id was claimed and kept
	transitions atomic.Uint64
	offset      atomic.Int64 // nanos: the peers' average clock minus ours, at start and every PeerClockEvery
	workersHeld atomic.Int64 // worker ids of the region its registry held at the last count; -1 before one
}

// New makes a Server that has not started: its status names the layout
// and, once it registers one, the worker id it claims.
func New(cfg Config) *Server {
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.IDClock == nil {
		cfg.IDClock = cfg.Clock
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PeerClockEvery <= 0 {
		cfg.PeerClockEvery = 30 * time.Second
	}
	if cfg.WorkerCountEvery <= 0 {
		cfg.WorkerCountEvery = 30 * time.Second
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.claim.Store(-1)
	s.workersHeld.Store(-1)
	return s
}

// Start checks the layout and the clock against the data directory and
// the live nodes, claims a worker id and starts the Source and its ring.
// The node joins the queue group later, once the Source serves (Serve).
// An error wraps ErrConfig where trying again cannot help.
func (s *Server) Start(ctx context.Context) error {
	if s == nil {
		return nil
	}
	cfg := s.cfg
	layout, now := cfg.Layout, cfg.IDClock
	// Before checkLayout records the layout in the data directory: a layout
	// that cannot make ids is refused without becoming the one the next
	// start must match.
	if err := layout.Usable(now.Now()); err != nil {
		if errors.Is(err, snowflake.ErrExpired) {
			return fmt.Errorf("%w: choose a later epoch (--snowflake-epoch) or more time bits", err)
		}
		return fmt.Errorf("%w: %w: --snowflake-epoch must not be after the present", ErrConfig, err)
	}
	if err := s.checkLayout(); err != nil {
		return err
	}
	if err := s.checkPeers(ctx); err != nil {
		return err
	}
	left := layout.Remaining(now.Now())
	s.log.Info("snowflake layout", "layout", layout.String(), "expires", layout.Expires(), "left", left.Round(time.Hour))
	if left < cfg.LayoutWarn {
		msg := fmt.Sprintf("the snowflake layout %s runs out of time bits at %v (%v from now): choose a later epoch or more time bits before then",
			layout, layout.Expires().UTC(), left.Round(time.Hour))
		s.log.Error(msg)
		cfg.Events.Emit(events.Event{Kind: events.LayoutExpiring, Level: events.Error, Message: msg,
			Fields: map[string]any{"expires": layout.Expires().UTC(), "left_hours": int64(left.Hours()), "layout": layout.String()}})
	}
	if err := s.checkClocks(ctx); err != nil {
		return err
	}
	if cfg.LeaseFiles != "" {
		s.diskPast = fieldsOf(layout, cfg.Region, snowflake.ReadLeaseFiles(filepath.Join(cfg.DataDir, "snowflake"), cfg.LeaseFiles))
	}
	s.states = make(chan snowflake.State, 16)
	var err error
	s.src, err = snowflake.StartSource(ctx, snowflake.SourceConfig{
		Open:         cfg.Open,
		Layout:       layout,
		Region:       cfg.Region,
		Clock:        now,
		LeaseAhead:   cfg.LeaseAhead,
		MaxBackward:  cfg.MaxBackward,
		MaxStartWait: cfg.MaxStartWait,
		NewWorker:    cfg.NewWorker,
		Holder:       s.holder,
		PeerLease:    cfg.Lease,
		ClockSkew:    max(cfg.PeerClockMax, 0),
		Logger:       s.log,
		OnEvent:      s.onEvent,
	})
	if err != nil {
		return err
	}
	s.ring, err = producer.NewSnowflake(producer.SnowflakeConfig{
		IDs:    s.src,
		Size:   cfg.Ring,
		MaxAge: max(time.Second, 2*layout.TimeUnit),
		TimeOf: func(id int64) time.Time { return layout.Decompose(id).Time },
		Clock:  now,
		Logger: s.log,
	})
	return err
}

// fieldsOf keys the leases of a registry's worker ids (region's, as the
// lease files name them) by the ids' worker fields, as the Source's Past
// and the status are keyed; a worker id outside the layout is dropped.
func fieldsOf(layout snowflake.Layout, region int64, leases map[int64]time.Time) map[int64]time.Time {
	out := make(map[int64]time.Time, len(leases))
	for w, until := range leases {
		if f, err := layout.WorkerField(region, w); err == nil {
			out[f] = until
		}
	}
	return out
}

// holder is the Source's Holder: this node's claim goes into its status
// before it asks the live nodes (see snowflake.SourceConfig.Holder: of
// two nodes that register one worker id at once, at least one refuses).
func (s *Server) holder(ctx context.Context, worker int64) (string, error) {
	s.claim.Store(worker)
	if s.cfg.Holder == nil {
		return "", nil
	}
	return s.cfg.Holder(ctx, worker)
}

// checkPeers refuses to serve snowflake beside live nodes that use
// another layout (the same time maps to other bits: ids of the two can be
// equal): all answer leaf.snowflake in one queue group. A new data
// directory has no layout record of its own (checkLayout); its peers are
// the record. Live nodes that take worker ids from another registry (two
// registries can give the same worker id) get a loud warning: the chaos
// harness mixes ZooKeeper and KV nodes on purpose.
func (s *Server) checkPeers(ctx context.Context) error {
	if s.cfg.Peers == nil {
		return nil
	}
	peers, err := s.cfg.Peers(ctx)
	if err != nil {
		return err
	}
	layout := s.cfg.Layout
	for _, p := range peers {
		switch {
		case p.Snow == nil:
		case p.Snow.Layout != layout.String():
			return fmt.Errorf("%w: snowflake: live node %s serves layout %s, this node %s: their ids can be equal; give every node the same --snowflake-layout, --snowflake-epoch and --snowflake-unit",
				ErrConfig, p.Node, p.Snow.Layout, layout)
		case p.Snow.Registry != s.cfg.Registry:
			msg := fmt.Sprintf("live node %s takes snowflake worker ids from %s, this node from %s: two registries can give the same worker id, and then the same ids; give every node the same --worker-registry",
				p.Node, p.Snow.Registry, s.cfg.Registry)
			s.log.Error(msg)
		}
	}
	return nil
}

// checkClocks refuses to start with a clock more than PeerClockMax off
// the live nodes' average, and records the offset.
func (s *Server) checkClocks(ctx context.Context) error {
	limit := s.cfg.PeerClockMax
	if limit <= 0 || s.cfg.Clocks == nil {
		return nil
	}
	pc, err := s.cfg.Clocks(ctx, s.cfg.IDClock.Now)
	if err != nil {
		return err
	}
	if len(pc.Peers) == 0 {
		return nil
	}
	s.log.Info("peer clocks", "peers", len(pc.Peers), "offset", pc.Offset, "max", pc.Max)
	s.offset.Store(int64(pc.Offset))
	lvl := events.Info
	if pc.Offset.Abs() > limit {
		lvl = events.Error
	}
	s.cfg.Events.Emit(events.Event{Kind: events.ClockOffset, Level: lvl,
		Message: fmt.Sprintf("clock %v off the average of %d live nodes", (-pc.Offset).Round(time.Millisecond), len(pc.Peers)),
		Fields:  map[string]any{"offset_ms": float64(-pc.Offset) / 1e6, "peers": pc.Peers}})
	if pc.Offset.Abs() > limit {
		return fmt.Errorf("snowflake: this clock is %v off the average of %d live nodes (%s), more than --peer-clock-max %v: fix the clock",
			(-pc.Offset).Round(time.Millisecond), len(pc.Peers), strings.Join(pc.Peers, ", "), limit)
	}
	return nil
}

// onEvent is the Source's OnEvent: publish the event and hand the state
// to apply (never joining or leaving the queue group from a handler's
// goroutine).
func (s *Server) onEvent(ev snowflake.Event) {
	if ev.Registered {
		s.held.Store(true)
	}
	s.transitions.Add(1)
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
	s.cfg.Events.Emit(e)
	select {
	case s.states <- ev.State:
	default: // apply reads the Source's state anyway
	}
}

// Serve puts the node in g at once if the Source serves, and from then on
// keeps it there exactly while the Source serves; it measures the live
// nodes' clocks every PeerClockEvery and counts the region's held worker
// ids every WorkerCountEvery. Until Stop.
func (s *Server) Serve(g Group) error {
	if s == nil || s.src == nil {
		return nil
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.src.State() == snowflake.StateServing && !s.yield() {
		if err := g.SetSnowflake(true); err != nil {
			s.cancel()
			return err
		}
	}
	s.group = g
	s.stop = make(chan struct{})
	s.wg.Add(3)
	go s.apply()
	go s.watchClocks()
	go s.countWorkers()
	s.states <- s.src.State()
	return nil
}

// Stop ends what Serve started; the node stays where it is in the group.
func (s *Server) Stop() {
	if s == nil || s.stop == nil {
		return
	}
	close(s.stop)
	s.cancel()
	s.wg.Wait()
}

// yield is Config.Yield, false without it.
func (s *Server) yield() bool {
	return s.cfg.Yield != nil && s.cfg.Yield(s.ctx)
}

// Close closes the ring, then the Source (it releases the worker id).
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	if s.ring != nil {
		if err := s.ring.Close(); err != nil {
			errs = append(errs, fmt.Errorf("ring: %w", err))
		}
	}
	if s.src != nil {
		if err := s.src.Close(); err != nil {
			errs = append(errs, fmt.Errorf("source: %w", err))
		}
	}
	return errors.Join(errs...)
}

// apply keeps the node in the snowflake queue group exactly while the
// Source serves and the node does not yield to a faster one
// (Config.Yield).
func (s *Server) apply() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.states:
		case <-t.C():
		}
		serving := s.src.State() == snowflake.StateServing
		yield := serving && s.yield()
		on := serving && !yield
		was := s.group.SnowflakeService() != nil
		if err := s.group.SetSnowflake(on); err != nil {
			s.log.Warn("snowflake queue group change failed", "join", on, "err", err)
			continue
		}
		switch {
		case on && !was:
			s.cfg.Events.Emit(events.Event{Kind: events.QueueJoined, Message: "joined the snowflake queue group",
				Fields: map[string]any{"worker": s.src.Worker()}})
		case !on && was && yield:
			s.cfg.Events.Emit(events.Event{Kind: events.QueueLeft, Level: events.Warn,
				Message: "left the snowflake queue group: the round trip to NATS is above --max-nats-rtt and a live node that is not slow serves snowflake",
				Fields:  map[string]any{"worker": s.src.Worker()}})
		case !on && was:
			s.cfg.Events.Emit(events.Event{Kind: events.QueueLeft, Level: events.Warn,
				Message: "left the snowflake queue group: snowflake is " + s.src.State().String(),
				Fields:  map[string]any{"worker": s.src.Worker()}})
		}
	}
}

// watchClocks measures the clock offset to the live peers every
// PeerClockEvery (Offset): a clock that drifts after the start shows up in
// the metric and its alert, and in an error event past PeerClockMax.
func (s *Server) watchClocks() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.PeerClockEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pc, err := ask.PeerClocksBut(ctx, s.cfg.Conn, s.cfg.Scope, 500*time.Millisecond, s.cfg.IDClock.Now, s.cfg.Name)
		cancel()
		if err != nil || len(pc.Peers) == 0 {
			continue
		}
		s.offset.Store(int64(pc.Offset))
		if limit := s.cfg.PeerClockMax; limit > 0 && pc.Offset.Abs() > limit {
			msg := fmt.Sprintf("clock %v off the average of %d live nodes, more than --peer-clock-max %v: fix the clock (NTP)",
				(-pc.Offset).Round(time.Millisecond), len(pc.Peers), limit)
			s.log.Error(msg)
			s.cfg.Events.Emit(events.Event{Kind: events.ClockOffset, Level: events.Error, Message: msg,
				Fields: map[string]any{"offset_ms": float64(-pc.Offset) / 1e6, "peers": pc.Peers}})
		}
	}
}

// countWorkers counts the worker ids the region's registry holds at once
// and every WorkerCountEvery (WorkerIDs), off the request path. A count
// that fails (no registration now, the registry unreachable) keeps the
// last one: the gauge would otherwise vanish with each blip of the
// registry, and an alert on it start its wait again.
func (s *Server) countWorkers() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.WorkerCountEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		n, err := s.src.HeldWorkers(ctx)
		cancel()
		switch {
		case err == nil:
			s.workersHeld.Store(int64(n))
		case errors.Is(err, errors.ErrUnsupported):
			return // a registry that counts none (static): no gauge
		default:
			s.log.Debug("snowflake: cannot count the region's held worker ids", "err", err)
		}
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
	}
}

// WorkerIDs is the worker ids of the node's region: capacity, the
// layout's MaxWorker+1, and free, capacity less those its registry held
// at the last count (snowflake.HeldCounter; taken every
// WorkerCountEvery while the node serves, so up to that old). ok is false
// before a count succeeded, and for a registry that counts none.
func (s *Server) WorkerIDs() (free, capacity int64, ok bool) {
	if s == nil {
		return 0, 0, false
	}
	held := s.workersHeld.Load()
	if held < 0 {
		return 0, 0, false
	}
	capacity = s.cfg.Layout.MaxWorker() + 1
	return max(capacity-held, 0), capacity, true
}

// Region is the node's region's name, "" without regions (Config.Scope).
func (s *Server) Region() string {
	if s == nil {
		return ""
	}
	return string(s.cfg.Scope)
}

// Source is the snowflake source, nil before Start.
func (s *Server) Source() *snowflake.Source {
	if s == nil {
		return nil
	}
	return s.src
}

// Ring is the Source's ring, nil before Start.
func (s *Server) Ring() *producer.Snowflake {
	if s == nil {
		return nil
	}
	return s.ring
}

// Layout is the ids' layout (the zero Layout of a nil Server).
func (s *Server) Layout() snowflake.Layout {
	if s == nil {
		return snowflake.Layout{}
	}
	return s.cfg.Layout
}

// Clock is the ids' clock (Config.IDClock), nil of a nil Server.
func (s *Server) Clock() clock.Clock {
	if s == nil {
		return nil
	}
	return s.cfg.IDClock
}

// Held reports whether a worker id was claimed and kept (a registry that
// stands in for itself at start only, ZooKeeper's cache file, claims in
// earnest from then on).
func (s *Server) Held() bool { return s != nil && s.held.Load() }

// Transitions counts the Source's changes of state.
func (s *Server) Transitions() uint64 {
	if s == nil {
		return 0
	}
	return s.transitions.Load()
}

// Offset is the live peers' average clock minus this node's, as last
// measured (0 without peers).
func (s *Server) Offset() time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(s.offset.Load())
}

// Remaining is the time left before the layout's time bits run out.
func (s *Server) Remaining() time.Duration {
	if s == nil {
		return 0
	}
	return s.cfg.Layout.Remaining(s.cfg.IDClock.Now())
}

// Starting is what a starting node says of its snowflake: the layout and
// the worker id it registers. It reads only the configuration and
// atomics.
func (s *Server) Starting() *wire.SnowflakeStatus {
	if s == nil {
		return nil
	}
	st := &wire.SnowflakeStatus{State: "registering", Worker: -1, Registry: s.cfg.Registry, Layout: s.cfg.Layout.String()}
	if c := s.claim.Load(); c >= 0 {
		st.Claim = &c
	}
	return st
}

// Status is the snowflake part of the node's status once started (nil
// before); joined tells whether the node is in the queue group.
func (s *Server) Status(joined bool) *wire.SnowflakeStatus {
	if s == nil || s.src == nil {
		return nil
	}
	l := s.cfg.Layout
	sf := &wire.SnowflakeStatus{
		State:      s.src.State().String(),
		Worker:     s.src.Worker(),
		Registry:   s.cfg.Registry,
		Layout:     l.String(),
		Expires:    l.Expires().UnixNano(),
		Joined:     joined,
		PeerOffset: s.offset.Load(),
	}
	if c := s.claim.Load(); c >= 0 {
		sf.Claim = &c
	}
	if lease := s.src.Leased(); !lease.IsZero() {
		sf.LeaseUntil = lease.UnixNano()
	}
	past := s.src.Past()
	now := s.cfg.Clock.Now()
	for w, until := range s.diskPast { // held before a restart
		if w != sf.Worker && until.After(now) && until.After(past[w]) {
			past[w] = until
		}
	}
	for w, until := range past {
		sf.Past = append(sf.Past, wire.WorkerLease{Worker: w, Until: until.UnixNano()})
	}
	sort.Slice(sf.Past, func(i, j int) bool { return sf.Past[i].Worker < sf.Past[j].Worker })
	if s.ring != nil {
		rs := s.ring.Stats()
		sf.RingLen, sf.RingCap, sf.Taken = rs.Len, rs.Cap, rs.Served
	}
	if free, capacity, ok := s.WorkerIDs(); ok {
		sf.WorkersFree, sf.WorkersCap = &free, capacity
	}
	return sf
}

// Problem is what keeps the snowflake subject from being ready, "" when
// nothing does: fatal makes the node unready; the rest (a Source waiting
// for its clock) does not, as the node is out of the queue group
// meanwhile.
func (s *Server) Problem() (msg string, fatal bool) {
	if s == nil || s.src == nil {
		return "", false
	}
	switch st := s.src.State(); st {
	case snowflake.StateServing:
		if lease := s.src.Leased(); s.cfg.IDClock.Now().After(lease) {
			return fmt.Sprintf("snowflake: time lease expired at %s (worker registry unreachable?)", lease.UTC().Format(time.RFC3339)), true
		}
		return "", false
	case snowflake.StateLost, snowflake.StateClosed:
		return "snowflake: " + st.String() + ": no worker id", true
	default:
		return "snowflake: " + st.String() + ": out of the queue group until the clock catches up", false
	}
}
