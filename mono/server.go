package mono

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Defaults of ServerConfig.
const (
	// DefaultRefresh is how often a Server re-reads which tags are
	// monotonic, on top of the announcements of new ones
	// (wire.TagChangedPrefix).
	DefaultRefresh = 60 * time.Second
	// DefaultBalanceEvery is how often a Server compares the monotonic
	// tags it leads with its share (the tags over the live nodes, rounded
	// up) and yields the ones above it.
	DefaultBalanceEvery = 10 * time.Second
)

// ServerConfig configures a Server. The funcs are called concurrently.
type ServerConfig struct {
	Node  string        // the holder name in the leases; required
	Store segment.Store // which tags are monotonic, and their steps; required
	// Lease is the tags' lease, shared by their Leaders. Close closes it
	// when it is an io.Closer. Required.
	Lease Lease
	// Floors, PeerFloor, PeerMode and Announce are where the Leaders
	// reserve their ranges (see reserver): this node's floors (its
	// segment engine's), the highest floor of a tag its peers announced,
	// the mode a peer served a tag in ("" when none did), and where a
	// raised floor is announced. Each may be nil: no floor of this node
	// (or of its peers) is kept or checked, no mode of a peer, nothing
	// announced.
	Floors    segment.Floors
	PeerFloor func(tag string) (int64, error)
	PeerMode  func(tag string) string
	Announce  segment.Announcer
	// Regions places this region's ids in a deployment of many regions
	// (Config.Regions). The zero value: one region.
	Regions segment.Regions
	// Serve answers leaf.mono.<tag> from l until stop is called
	// (responder.Responder.ServeMono). Required.
	Serve func(tag wire.Tag, l *Leader) (stop func(), err error)
	// MayLead, if set, is asked each time this node comes to lead a tag,
	// before it serves it (region.Homes.Lead: no other region holds the
	// tag as monotonic). On an error the node does not serve the tag and
	// yields its lease for RefusedFor, so that the region's nodes ask
	// again then.
	MayLead func(ctx context.Context, tag wire.Tag) error
	// Subscribe has announced called with the name of every tag announced
	// as new (wire.TagChangedPrefix), until stop is called. Nil: new
	// tags are found by the refresh only.
	Subscribe func(announced func(tag string)) (stop func(), err error)
	// Nodes returns the status of every live node (ask.Status), for the
	// balance of leadership. Nil: no balance.
	Nodes func(ctx context.Context) ([]wire.NodeStatus, error)
	// MaxRTT, when not 0, is the round trip to NATS above which a node is
	// slow (--max-nats-rtt): a slow leader's ids reach clients late, so
	// the tags are shared over the nodes that are not slow
	// (wire.NodeStatus.NATSRTT) while there are any, and a slow node
	// yields every tag it leads to them. RTT is this node's round trip;
	// nil: never slow.
	MaxRTT time.Duration
	RTT    func() time.Duration
	// Refresh and BalanceEvery: defaults DefaultRefresh and
	// DefaultBalanceEvery.
	Refresh      time.Duration
	BalanceEvery time.Duration
	Logger       *slog.Logger // default slog.Default()
	Clock        clock.Clock  // default clock.Real
}

// Server runs a Leader for every monotonic tag of the store (every node
// competes for every such tag) and, while one leads its tag, has it
// answered on leaf.mono.<tag> (ServerConfig.Serve): only the leader
// subscribes, so a request finds the one node that may answer, or no
// responder at all during a switch-over (the client asks again). Its
// methods are safe for concurrent use, and on a nil *Server, which leads
// no tag.
type Server struct {
	cfg     ServerConfig
	ranges  *segment.Reserver
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	leading atomic.Int64 // tags this node leads now
	unsub   func()       // ends the announcements; nil without Subscribe

	mu   sync.Mutex
	tags map[string]*serverTag
}

type serverTag struct {
	l    *Leader
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	unserve func() // while leading: ends the answers
	gen     uint64 // counts the changes of leadership, for MayLead's answer
}

// RefusedFor is how long a node that MayLead refused a tag stays out of
// the race for its lease: the region's nodes ask again that often (one
// question to the other regions), so the tag is served here soon after
// the other region let it go.
const RefusedFor = 10 * time.Second

// StartServer subscribes to the announcements of new monotonic tags and
// starts a Leader for every monotonic tag of the store. A failed listing
// of the tags is logged and tried again in the background; ctx bounds it.
// Close stops the Server.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Node == "" || cfg.Store == nil || cfg.Lease == nil || cfg.Serve == nil {
		return nil, fmt.Errorf("%w: mono: Node, Store, Lease and Serve are required", segment.ErrInvalid)
	}
	if cfg.PeerMode == nil {
		cfg.PeerMode = func(string) string { return "" }
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.BalanceEvery == 0 {
		cfg.BalanceEvery = DefaultBalanceEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	m := &Server{cfg: cfg, ranges: reserver(cfg), tags: map[string]*serverTag{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if cfg.Subscribe != nil {
		var err error
		m.unsub, err = cfg.Subscribe(func(tag string) {
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.check(tag)
			}()
		})
		if err != nil {
			m.cancel()
			return nil, err
		}
	}
	if err := m.refresh(ctx); err != nil {
		cfg.Logger.Warn("mono: listing the monotonic tags failed; retrying in the background", "err", err)
	}
	m.wg.Add(1)
	go m.every(cfg.Refresh, func() {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		defer cancel()
		if err := m.refresh(ctx); err != nil && m.ctx.Err() == nil {
			m.cfg.Logger.Warn("mono: listing the monotonic tags failed", "err", err)
		}
	})
	if cfg.Nodes != nil {
		m.wg.Add(1)
		go m.every(cfg.BalanceEvery, m.balance)
	}
	return m, nil
}

// every calls f every d until the server closes (one of m.wg).
func (m *Server) every(d time.Duration, f func()) {
	defer m.wg.Done()
	t := m.cfg.Clock.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C():
			f()
		}
	}
}

// refresh starts a leader for every monotonic tag and stops those of tags
// that are gone.
func (m *Server) refresh(ctx context.Context) error {
	modes, err := m.cfg.Store.Modes(ctx)
	if err != nil {
		return err
	}
	for name, md := range modes {
		if tag, err := wire.ParseTag(name); err == nil && md.Kind == segment.KindMono {
			m.ensure(ctx, tag)
		}
	}
	m.drop(func(tag string) bool { return modes[tag].Kind != segment.KindMono })
	return nil
}

// drop stops the leaders of the tags gone says are gone (each hands its
// lease back) and returns how many it stopped.
func (m *Server) drop(gone func(tag string) bool) int {
	m.mu.Lock()
	var stop []*serverTag
	for tag, t := range m.tags {
		if gone(tag) {
			stop = append(stop, t)
			delete(m.tags, tag)
		}
	}
	m.mu.Unlock()
	for _, t := range stop {
		t.close()
	}
	return len(stop)
}

// check makes tag's leader agree with the store: started if the store
// holds the tag as monotonic, stopped if it holds it no longer (deleted;
// another mode), which hands the lease back. Called at every announcement
// of the tag (wire.TagChangedPrefix: a create, a restart) and when a
// leader's reservation finds the tag gone (Config.Gone): a leader without
// its row serves the rest of its ranges, and holds its region's answer
// that the tag is monotonic there (I6) until it stops.
func (m *Server) check(name string) {
	tag, err := wire.ParseTag(name)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	t, err := m.cfg.Store.Get(ctx, tag)
	switch {
	case err == nil && t.Mode.Kind == segment.KindMono:
		m.ensure(ctx, tag)
	case err == nil, errors.Is(err, segment.ErrUnknownTag), errors.Is(err, segment.ErrTagDeleted):
		if m.drop(func(n string) bool { return n == name }) == 0 {
			return
		}
		m.cfg.Logger.Info("mono: the tag is no longer monotonic in the store: no longer leading it", "tag", tag)
		// A create of the tag again whose announcement came between the
		// read and the drop found the old leader running and started none.
		if t, err := m.cfg.Store.Get(ctx, tag); err == nil && t.Mode.Kind == segment.KindMono {
			m.ensure(ctx, tag)
		}
	case m.ctx.Err() == nil:
		m.cfg.Logger.Warn("mono: looking up an announced tag", "tag", tag, "err", err)
	}
}

// ensure starts tag's leader unless it runs.
func (m *Server) ensure(ctx context.Context, tag wire.Tag) {
	m.mu.Lock()
	_, ok := m.tags[tag.String()]
	m.mu.Unlock()
	if ok || m.ctx.Err() != nil {
		return
	}
	step := segment.DefaultStep
	if t, err := m.cfg.Store.Get(ctx, tag); err == nil {
		step = t.Step
	}
	t := &serverTag{done: make(chan struct{})}
	l, err := NewLeader(Config{
		Tag:       tag,
		Node:      m.cfg.Node,
		Ranges:    m.ranges,
		Lease:     m.cfg.Lease,
		Step:      step,
		Regions:   m.cfg.Regions,
		Hold:      m.hold,
		OnLeading: func(leading bool) { m.onLeading(tag, t, leading) },
		Gone:      func() { m.check(tag.String()) },
		Logger:    m.cfg.Logger,
		Clock:     m.cfg.Clock,
	})
	if err != nil {
		m.cfg.Logger.Error("mono: cannot lead tag", "tag", tag, "err", err)
		return
	}
	t.l = l
	m.mu.Lock()
	if _, ok := m.tags[tag.String()]; ok || m.ctx.Err() != nil {
		m.mu.Unlock()
		return
	}
	m.tags[tag.String()] = t
	m.mu.Unlock()
	var lctx context.Context
	lctx, t.stop = context.WithCancel(m.ctx)
	go func() {
		defer close(t.done)
		l.Run(lctx)
	}()
}

// hold spreads leadership: a node waits 200 ms per tag it leads (at most
// half the lease's TTL) before it tries for a free lease, so nodes that
// lead fewer tags take them first.
func (m *Server) hold() time.Duration {
	return min(time.Duration(m.leading.Load())*200*time.Millisecond, m.cfg.Lease.TTL()/2)
}

// balance yields the tags this node leads above its share: the
// monotonic tags over the live nodes, rounded up (over the fast ones, and
// none for a slow node, while any node is fast: ServerConfig.MaxRTT). A yielded tag has no
// leader until another node takes it (within the lease's retry), and its
// ids stay above every id served before (a new leader takes a fresh
// range).
func (m *Server) balance() {
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	all, err := m.cfg.Nodes(ctx)
	if err != nil {
		return
	}
	slow := func(rtt time.Duration) bool { return m.cfg.MaxRTT > 0 && rtt > m.cfg.MaxRTT }
	var nodes, fast []wire.NodeStatus
	for _, st := range all {
		if st.Starting { // not taking tags yet
			continue
		}
		nodes = append(nodes, st)
		if !slow(time.Duration(st.NATSRTT)) {
			fast = append(fast, st)
		}
	}
	if len(nodes) == 0 {
		return
	}
	self := len(nodes) // the nodes a fast node shares the tags with
	if len(fast) > 0 {
		self = len(fast)
	}
	m.mu.Lock()
	total := len(m.tags)
	var lead []*serverTag
	for _, t := range m.tags {
		if t.l.Leading() {
			lead = append(lead, t)
		}
	}
	m.mu.Unlock()
	share := (total + self - 1) / self
	if m.cfg.RTT != nil && slow(m.cfg.RTT()) && len(fast) > 0 {
		share = 0 // the fast nodes take them
	}
	for i := 0; i < len(lead)-share; i++ {
		lead[i].l.Yield(2 * m.cfg.Lease.TTL())
	}
	if len(lead) > share {
		m.cfg.Logger.Info("mono: yielding tags above this node's share", "leading", len(lead), "share", share, "nodes", len(nodes), "fast", len(fast))
	}
}

// Leading counts the tags this node leads and answers now, those still
// waiting out the last leader's lease included (ServingNow).
func (m *Server) Leading() int {
	if m == nil {
		return 0
	}
	return int(m.leading.Load())
}

// ServingNow counts the tags this node leads and serves now, and names
// those it leads but may not serve yet: a new leader answers 503 until the
// lease of the leader before it has surely run out (Grant.Wait), and
// readiness must say so rather than count the tag as served; and those it
// leads without ids to hand out (Leader.Dry: a store that does not
// answer), or cannot lead at all (a lease store that refuses every grant),
// each with why.
func (m *Server) ServingNow() (serving int, waiting, dry []string) {
	if m == nil {
		return 0, nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for tag, t := range m.tags {
		t.mu.Lock()
		leading := t.unserve != nil
		t.mu.Unlock()
		if t.l == nil {
			continue
		}
		if !leading {
			if why := t.l.Dry(); why != "" { // a lease store that refuses every grant
				dry = append(dry, tag+": "+why)
			}
			continue
		}
		if !t.l.Leading() {
			waiting = append(waiting, tag)
			continue
		}
		if why := t.l.Dry(); why != "" {
			dry = append(dry, tag+": "+why)
			continue
		}
		serving++
	}
	slices.Sort(waiting)
	slices.Sort(dry)
	return serving, waiting, dry
}

func (m *Server) onLeading(tag wire.Tag, t *serverTag, leading bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !leading {
		t.gen++
		if t.unserve != nil {
			t.unserve()
			t.unserve = nil
			m.leading.Add(-1)
		}
		return
	}
	if t.unserve != nil {
		return
	}
	t.gen++
	if m.cfg.MayLead != nil {
		// Asked off the Leader's goroutine, which must not block (it
		// renews the lease); the answer counts only while this node still
		// leads as it did when it asked.
		gen := t.gen
		m.wg.Go(func() {
			err := m.cfg.MayLead(m.ctx, tag)
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.gen != gen || t.unserve != nil || m.ctx.Err() != nil {
				return
			}
			if err != nil {
				m.cfg.Logger.Error("mono: not serving the tag, though this node leads it here", "tag", tag, "err", err)
				t.l.Yield(RefusedFor)
				return
			}
			m.serveLocked(tag, t)
		})
		return
	}
	m.serveLocked(tag, t)
}

// serveLocked has the tag answered; t.mu is held.
func (m *Server) serveLocked(tag wire.Tag, t *serverTag) {
	unserve, err := m.cfg.Serve(tag, t.l)
	if err != nil {
		m.cfg.Logger.Error("mono: subscribing to the tag's subject", "tag", tag, "err", err)
		return
	}
	t.unserve = unserve
	m.leading.Add(1)
}

// Close stops every leader (each releases its lease, so another node
// takes over at once) and stops answering; then it closes the lease.
func (m *Server) Close() {
	if m == nil {
		return
	}
	if m.unsub != nil {
		m.unsub()
	}
	m.cancel()
	m.mu.Lock()
	tags := m.tags
	m.tags = map[string]*serverTag{}
	m.mu.Unlock()
	for _, t := range tags {
		t.close()
	}
	m.wg.Wait()
	if c, ok := m.cfg.Lease.(io.Closer); ok {
		_ = c.Close()
	}
}

func (t *serverTag) close() {
	t.stop()
	<-t.done
	t.mu.Lock()
	if t.unserve != nil {
		t.unserve()
		t.unserve = nil
	}
	t.mu.Unlock()
}

// Holder names the node that holds tag's lease now, "" for none. A nil
// Server (a node starting, or one whose lease bucket could not be opened)
// cannot tell: an error wrapping segment.ErrUnavailable, not "none", since
// another node of its region may lead the tag.
func (m *Server) Holder(ctx context.Context, tag string) (string, error) {
	if m == nil {
		return "", fmt.Errorf("%w: this node has no monotonic lease bucket open: it cannot tell who leads tag %q", segment.ErrUnavailable, tag)
	}
	return m.cfg.Lease.Holder(ctx, tag)
}

// LeadingTags lists the monotonic tags this node leads now, sorted.
func (m *Server) LeadingTags() []string {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for tag, t := range m.tags {
		if t.l.Leading() {
			out = append(out, tag)
		}
	}
	sort.Strings(out)
	return out
}

// reserver is where a monotonic leader reserves its ranges: as the
// engine does (segment.Reserver: above this node's and its peers' floors
// of the tag, the floor raised and announced before any id of it is
// served), except that a range must be of a monotonic tag that neither this
// node nor a peer served in another mode, and one whose floor could not be
// made durable is not served.
func reserver(cfg ServerConfig) *segment.Reserver {
	return &segment.Reserver{
		Store:        cfg.Store,
		Floors:       cfg.Floors,
		PeerFloor:    cfg.PeerFloor,
		Announce:     cfg.Announce,
		RequireFloor: true,
		Logger:       cfg.Logger,
		Accept: func(a segment.Alloc) error {
			if a.Mode.Kind != segment.KindMono {
				return fmt.Errorf("%w: tag %q is %s in the store, not mono: no id served", segment.ErrMode, a.Tag, a.Mode)
			}
			if !keptMono(cfg.Floors, cfg.PeerMode, a.Tag.String()) {
				return fmt.Errorf("%w: tag %q: this node or a peer served it in another mode than mono: no id served", segment.ErrMode, a.Tag)
			}
			return nil
		},
	}
}

// keptMono reports whether neither this node's floors nor its peers
// recorded another mode than mono for tag, and records mono.
func keptMono(floors segment.Floors, peerMode func(string) string, tag string) bool {
	want := string(segment.KindMono)
	if p := peerMode(tag); p != "" && p != want {
		return false
	}
	k, ok := floors.(segment.ModeKeeper)
	if !ok {
		return true
	}
	if had, ok := k.Mode(tag); ok && had != want {
		return false
	}
	k.KeepMode(tag, want)
	return true
}
