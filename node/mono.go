package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/kvlease"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// monoRefresh is how often the node re-reads which tags are monotonic, on
// top of the announcements of new ones (wire.MonoAnnouncePrefix).
const monoRefresh = 60 * time.Second

// monoBalanceEvery is how often a node compares the monotonic tags it
// leads with its share (the tags over the live nodes, rounded up) and
// yields the ones above it.
var monoBalanceEvery = 10 * time.Second

// monoServer runs a mono.Leader for every monotonic tag of the store (every
// node competes for every such tag) and, while one leads its tag, has the
// responder answer leaf.mono.<tag> from it (responder.ServeMono): only the
// leader subscribes, so a request finds the one node that may answer, or
// no responder at all during a switch-over (the client asks again).
type monoServer struct {
	cfg     monoConfig
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	leading atomic.Int64 // tags this node leads now
	ann     *nats.Subscription

	mu   sync.Mutex
	tags map[string]*monoTag
}

// monoConfig is what a monoServer works with.
type monoConfig struct {
	nc     *nats.Conn    // the announcements of new tags, the live nodes' statuses (balance)
	store  segment.Store // which tags are monotonic, and their steps
	node   string        // the holder name in the leases
	lease  mono.Lease
	ranges mono.Ranges // where the leaders reserve (monoRanges)
	// serve answers leaf.mono.<tag> from src until stop is called
	// (responder.Responder.ServeMono).
	serve func(tag wire.Tag, src responder.MonoSource) (stop func(), err error)
	log   *slog.Logger
	clock clock.Clock
}

type monoTag struct {
	l    *mono.Leader
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	unserve func() // while leading: ends the responder's answers
}

// startMono opens the lease bucket and starts a leader for every
// monotonic tag. A node whose NATS has no JetStream for the lease logs it
// and serves no monotonic tag; the other modes are not affected. A bucket
// that does not answer in time is a transient error: Start tries again.
func (n *Node) startMono(ctx context.Context) error {
	js, err := jetstream.New(n.conn.NC())
	if err != nil {
		return err
	}
	lease, err := kvlease.Open(ctx, js, kvlease.Options{Replicas: n.cfg.Store.KVReplicas})
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		n.log.Error("mono: no lease bucket: this node serves no monotonic tag", "err", err)
		return nil
	case transient(err):
		// JetStream is there but slow (a loaded server, a leader
		// election): Start tries again, as for the store. Given up at
		// once, the node served no monotonic tag until restarted (CI,
		// a loaded machine: TestNATSClusterPermissions).
		return err
	default:
		n.log.Error("mono: no lease bucket: this node serves no monotonic tag", "err", err)
		return nil
	}
	m, err := startMonoServer(ctx, monoConfig{
		nc:     n.conn.NC(),
		store:  n.seg.store,
		node:   n.cfg.Name,
		lease:  lease,
		ranges: monoRanges(n.seg.store, n.seg.floors, n.peers.Floor, n.peers.Mode, n.peers, n.log),
		serve:  n.serve.resp.ServeMono,
		log:    n.log,
		clock:  n.clock,
	})
	if err != nil {
		_ = lease.Close()
		return err
	}
	n.seg.mono.Store(m)
	return nil
}

// startMonoServer subscribes to the announcements of new monotonic tags
// and starts a leader for every monotonic tag of the store.
func startMonoServer(ctx context.Context, cfg monoConfig) (*monoServer, error) {
	m := &monoServer{cfg: cfg, tags: map[string]*monoTag{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	var err error
	m.ann, err = cfg.nc.Subscribe(wire.MonoAnnouncePrefix+"*", func(msg *nats.Msg) {
		tag := strings.TrimPrefix(msg.Subject, wire.MonoAnnouncePrefix)
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
	if err := m.refresh(ctx); err != nil {
		cfg.log.Warn("mono: listing the monotonic tags failed; retrying in the background", "err", err)
	}
	m.wg.Add(2)
	go m.every(monoRefresh, func() {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		defer cancel()
		if err := m.refresh(ctx); err != nil && m.ctx.Err() == nil {
			m.cfg.log.Warn("mono: listing the monotonic tags failed", "err", err)
		}
	})
	go m.every(monoBalanceEvery, m.balance)
	return m, nil
}

// every calls f every d until the server closes (one of m.wg).
func (m *monoServer) every(d time.Duration, f func()) {
	defer m.wg.Done()
	t := m.cfg.clock.NewTicker(d)
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
func (m *monoServer) refresh(ctx context.Context) error {
	modes, err := m.cfg.store.Modes(ctx)
	if err != nil {
		return err
	}
	for name, md := range modes {
		if tag, err := wire.ParseTag(name); err == nil && md.Kind == segment.KindMono {
			m.ensure(ctx, tag)
		}
	}
	m.mu.Lock()
	var gone []*monoTag
	for tag, t := range m.tags {
		if modes[tag].Kind != segment.KindMono {
			gone = append(gone, t)
			delete(m.tags, tag)
		}
	}
	m.mu.Unlock()
	for _, t := range gone {
		t.close()
	}
	return nil
}

// check starts tag's leader if the store says the tag is monotonic.
func (m *monoServer) check(name string) {
	tag, err := wire.ParseTag(name)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	t, err := m.cfg.store.Get(ctx, tag)
	if err != nil {
		m.cfg.log.Warn("mono: looking up an announced tag", "tag", tag, "err", err)
		return
	}
	if t.Mode.Kind == segment.KindMono {
		m.ensure(ctx, tag)
	}
}

// ensure starts tag's leader unless it runs.
func (m *monoServer) ensure(ctx context.Context, tag wire.Tag) {
	m.mu.Lock()
	_, ok := m.tags[tag.String()]
	m.mu.Unlock()
	if ok || m.ctx.Err() != nil {
		return
	}
	step := segment.DefaultStep
	if t, err := m.cfg.store.Get(ctx, tag); err == nil {
		step = t.Step
	}
	t := &monoTag{done: make(chan struct{})}
	l, err := mono.NewLeader(mono.Config{
		Tag:       tag,
		Node:      m.cfg.node,
		Ranges:    m.cfg.ranges,
		Lease:     m.cfg.lease,
		Step:      step,
		Hold:      m.hold,
		OnLeading: func(leading bool) { m.onLeading(tag, t, leading) },
		Logger:    m.cfg.log,
		Clock:     m.cfg.clock,
	})
	if err != nil {
		m.cfg.log.Error("mono: cannot lead tag", "tag", tag, "err", err)
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
func (m *monoServer) hold() time.Duration {
	return min(time.Duration(m.leading.Load())*200*time.Millisecond, m.cfg.lease.TTL()/2)
}

// balance yields the tags this node leads above its share: the
// monotonic tags over the live nodes, rounded up. A yielded tag has no
// leader until another node takes it (within the lease's retry), and its
// ids stay above every id served before (a new leader takes a fresh
// range).
func (m *monoServer) balance() {
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	all, err := ask.Status(ctx, m.cfg.nc, 300*time.Millisecond)
	if err != nil {
		return
	}
	var nodes []wire.NodeStatus
	for _, st := range all {
		if !st.Starting { // not taking tags yet
			nodes = append(nodes, st)
		}
	}
	if len(nodes) == 0 {
		return
	}
	m.mu.Lock()
	total := len(m.tags)
	var lead []*monoTag
	for _, t := range m.tags {
		if t.l.Leading() {
			lead = append(lead, t)
		}
	}
	m.mu.Unlock()
	share := (total + len(nodes) - 1) / len(nodes)
	for i := 0; i < len(lead)-share; i++ {
		lead[i].l.Yield(2 * m.cfg.lease.TTL())
	}
	if len(lead) > share {
		m.cfg.log.Info("mono: yielding tags above this node's share", "leading", len(lead), "share", share, "nodes", len(nodes))
	}
}

// servingNow counts the tags this node leads and serves now, and names
// those it leads but may not serve yet: a new leader answers 503 until the
// lease of the leader before it has surely run out (mono.Grant.Wait), and
// readiness must say so rather than count the tag as served.
func (m *monoServer) servingNow() (serving int, waiting []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for tag, t := range m.tags {
		t.mu.Lock()
		leading := t.unserve != nil
		t.mu.Unlock()
		switch {
		case !leading || t.l == nil:
		case t.l.Leading():
			serving++
		default:
			waiting = append(waiting, tag)
		}
	}
	slices.Sort(waiting)
	return serving, waiting
}

func (m *monoServer) onLeading(tag wire.Tag, t *monoTag, leading bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !leading {
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
	unserve, err := m.cfg.serve(tag, t.l)
	if err != nil {
		m.cfg.log.Error("mono: subscribing to the tag's subject", "tag", tag, "err", err)
		return
	}
	t.unserve = unserve
	m.leading.Add(1)
}

// close stops every leader (each releases its lease, so another node
// takes over at once) and stops answering.
func (m *monoServer) close() {
	if m == nil {
		return
	}
	_ = m.ann.Unsubscribe()
	m.cancel()
	m.mu.Lock()
	tags := m.tags
	m.tags = map[string]*monoTag{}
	m.mu.Unlock()
	for _, t := range tags {
		t.close()
	}
	m.wg.Wait()
	if c, ok := m.cfg.lease.(io.Closer); ok {
		_ = c.Close()
	}
}

func (t *monoTag) close() {
	t.stop()
	<-t.done
	t.mu.Lock()
	if t.unserve != nil {
		t.unserve()
		t.unserve = nil
	}
	t.mu.Unlock()
}

// MonoLeading lists the monotonic tags this node leads now, sorted.
func (n *Node) MonoLeading() []string { return n.seg.mono.Load().leadingTags() }

func (m *monoServer) leadingTags() []string {
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

// monoRanges is where a monotonic leader reserves its ranges: as the
// engine does (segment.Reserver: above this node's and its peers' floors
// of the tag, the floor raised and announced before any id of it is
// served), except that a range must be of a monotonic tag that neither this
// node nor a peer served in another mode, and one whose floor could not be
// made durable is not served.
func monoRanges(store segment.Store, floors segment.Floors, peerFloor func(string) int64, peerMode func(string) string,
	ann segment.Announcer, log *slog.Logger) *segment.Reserver {
	return &segment.Reserver{
		Store:        store,
		Floors:       floors,
		PeerFloor:    peerFloor,
		Announce:     ann,
		RequireFloor: true,
		Logger:       log,
		Accept: func(a segment.Alloc) error {
			if a.Mode.Kind != segment.KindMono {
				return fmt.Errorf("%w: tag %q is %s in the store, not mono: no id served", segment.ErrMode, a.Tag, a.Mode)
			}
			if !keptMono(floors, peerMode, a.Tag.String()) {
				return fmt.Errorf("%w: tag %q: this node or a peer served it in another mode than mono: no id served", segment.ErrMode, a.Tag)
			}
			return nil
		},
	}
}

// keptMono reports whether neither this node's floors nor its peers
// recorded another mode than mono for tag, and records mono.
func keptMono(floors segment.Floors, peerMode func(string) string, tag string) bool {
	mono := string(segment.KindMono)
	if p := peerMode(tag); p != "" && p != mono {
		return false
	}
	k, ok := floors.(segment.ModeKeeper)
	if !ok {
		return true
	}
	if had, ok := k.Mode(tag); ok && had != mono {
		return false
	}
	k.KeepMode(tag, mono)
	return true
}

// askMono fills dst with ids of a monotonic tag for the HTTP API: its
// leader may be another node, so it asks leaf.mono.<tag> over NATS, again
// after no responder or a 503 (a switch-over), until ctx ends. (The Go
// client does the same; node cannot import it.)
func (n *Node) askMono(ctx context.Context, tag wire.Tag, dst []int64) error {
	backoff := 10 * time.Millisecond
	for {
		reply, err := n.conn.NC().RequestMsgWithContext(ctx, wire.NewRequest(wire.MonoPrefix+tag.String(), len(dst), true))
		if err == nil {
			err = wire.ReplyError(reply)
		}
		if err == nil {
			ids, err := wire.DecodeIDs(dst[:0], reply.Data, true)
			if err == nil && len(ids) != len(dst) {
				err = fmt.Errorf("%w: %d ids, asked for %d", wire.ErrBadReply, len(ids), len(dst))
			}
			return err
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, wire.ErrUnavailable) {
			return err
		}
		t := n.clock.NewTimer(backoff)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: monotonic tag %q: no leader answered: %w", segment.ErrNotReady, tag, err)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// stopMono releases the monotonic leases while NATS is up: others take
// over at once.
func (n *Node) stopMono(context.Context) error { n.seg.mono.Load().close(); return nil }
