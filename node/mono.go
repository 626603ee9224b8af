package node

import (
	"context"
	"encoding/json"
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
// node competes for every such tag) and, while one leads its tag, answers
// leaf.mono.<tag> from it: only the leader subscribes, so a request finds
// the one node that may answer, or no responder at all during a
// switch-over (the client asks again).
type monoServer struct {
	n       *Node
	lease   mono.Lease
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	leading atomic.Int64  // tags this node leads now
	probed  atomic.Uint64 // self-probes (wire.ProbeHeader) this node's subscriptions answered
	ann     *nats.Subscription

	mu   sync.Mutex
	tags map[string]*monoTag
}

type monoTag struct {
	l    *mono.Leader
	stop context.CancelFunc
	done chan struct{}

	mu  sync.Mutex
	sub *nats.Subscription // while leading
}

// startMono opens the lease bucket and starts a leader for every
// monotonic tag. A node whose NATS has no JetStream for the lease logs it
// and serves no monotonic tag; the other modes are not affected. A bucket
// that does not answer in time is a transient error: Start tries again.
func (n *Node) startMono(ctx context.Context) error {
	js, err := jetstream.New(n.nc)
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
	m := &monoServer{n: n, lease: lease, log: n.log, tags: map[string]*monoTag{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.ann, err = n.nc.Subscribe(wire.MonoAnnouncePrefix+"*", func(msg *nats.Msg) {
		tag := strings.TrimPrefix(msg.Subject, wire.MonoAnnouncePrefix)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.check(tag)
		}()
	})
	if err != nil {
		m.cancel()
		_ = lease.Close()
		return err
	}
	if err := m.refresh(ctx); err != nil {
		n.log.Warn("mono: listing the monotonic tags failed; retrying in the background", "err", err)
	}
	m.wg.Add(2)
	go m.every(monoRefresh, func() {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		defer cancel()
		if err := m.refresh(ctx); err != nil && m.ctx.Err() == nil {
			m.log.Warn("mono: listing the monotonic tags failed", "err", err)
		}
	})
	go m.every(monoBalanceEvery, m.balance)
	n.mono.Store(m)
	return nil
}

// every calls f every d until the server closes (one of m.wg).
func (m *monoServer) every(d time.Duration, f func()) {
	defer m.wg.Done()
	t := m.n.clock.NewTicker(d)
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
	modes, err := m.n.store.Modes(ctx)
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
	t, err := m.n.store.Get(ctx, tag)
	if err != nil {
		m.log.Warn("mono: looking up an announced tag", "tag", tag, "err", err)
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
	if t, err := m.n.store.Get(ctx, tag); err == nil {
		step = t.Step
	}
	t := &monoTag{done: make(chan struct{})}
	l, err := mono.NewLeader(mono.Config{
		Tag:       tag,
		Node:      m.n.cfg.Name,
		Ranges:    monoRanges(m.n.store, m.n.floors, m.n.peers.floor, m.n.peers.mode, floorAnnouncer{m.n}, m.log),
		Lease:     m.lease,
		Step:      step,
		Hold:      m.hold,
		OnLeading: func(leading bool) { m.onLeading(tag.String(), t, leading) },
		Logger:    m.log,
		Clock:     m.n.clock,
	})
	if err != nil {
		m.log.Error("mono: cannot lead tag", "tag", tag, "err", err)
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
	return min(time.Duration(m.leading.Load())*200*time.Millisecond, m.lease.TTL()/2)
}

// balance yields the tags this node leads above its share: the
// monotonic tags over the live nodes, rounded up. A yielded tag has no
// leader until another node takes it (within the lease's retry), and its
// ids stay above every id served before (a new leader takes a fresh
// range).
func (m *monoServer) balance() {
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	all, err := ask.Status(ctx, m.n.nc, 300*time.Millisecond)
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
		lead[i].l.Yield(2 * m.lease.TTL())
	}
	if len(lead) > share {
		m.log.Info("mono: yielding tags above this node's share", "leading", len(lead), "share", share, "nodes", len(nodes))
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
		leading := t.sub != nil
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

func (m *monoServer) onLeading(tag string, t *monoTag, leading bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !leading {
		if t.sub != nil {
			_ = t.sub.Unsubscribe()
			t.sub = nil
			m.leading.Add(-1)
		}
		return
	}
	if t.sub != nil {
		return
	}
	// A plain subscription, not the queue group: a frozen old leader's
	// subscription stays on the server until it misses its pings (minutes),
	// and in a queue group it would take its share of the requests, each
	// of them then timing out. Outside one, every subscriber gets every
	// request and the live leader's answer comes first; the old one, if it
	// wakes, answers only 503 (its fence has passed), after the fact.
	sub, err := m.n.nc.Subscribe(wire.MonoPrefix+tag, func(msg *nats.Msg) { m.serve(t.l, tag, msg) })
	if err != nil {
		m.log.Error("mono: subscribing to the tag's subject", "tag", tag, "err", err)
		return
	}
	t.sub = sub
	m.leading.Add(1)
}

// serve answers one request of leaf.mono.<tag>: the body is a count, as on
// leaf.segment.<tag>, and the ids come in strictly increasing order.
// Requests of one subscription are served one at a time, in the order the
// node received them.
func (m *monoServer) serve(l *mono.Leader, tag string, msg *nats.Msg) {
	if msg.Header.Get(wire.ProbeHeader) != "" {
		m.probed.Add(1)
		body, _ := json.Marshal(wire.ProbeReply{Node: m.n.cfg.Name, Instance: m.n.instance, Subject: wire.SubjectMono})
		if err := msg.Respond(body); err != nil {
			m.log.Debug("mono: answering a probe failed", "tag", tag, "err", err)
		}
		return
	}
	start := m.n.clock.Now()
	count, err := wire.ParseCount(msg.Data, m.n.cfg.MaxBatch)
	if err != nil {
		m.fail(tag, msg, fmt.Errorf("%w: %v", segment.ErrInvalid, err), start)
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Second)
	defer cancel()
	ids := make([]int64, 0, count)
	for len(ids) < count {
		first, k, err := l.Next(ctx, count-len(ids))
		if err != nil {
			m.fail(tag, msg, err, start)
			return
		}
		for i := range k {
			ids = append(ids, first+int64(i))
		}
	}
	var body []byte
	if wire.WantsBinary(msg.Header) {
		body = wire.AppendBinary(nil, ids)
	} else {
		body = wire.AppendDecimal(nil, ids)
	}
	if err := msg.Respond(body); err != nil {
		m.log.Debug("mono: respond failed", "tag", tag, "err", err)
	}
	m.observe(tag, "200", len(ids), start)
}

func (m *monoServer) fail(tag string, msg *nats.Msg, err error, start time.Time) {
	code := wire.CodeOf(err)
	if errors.Is(err, mono.ErrNotLeader) || errors.Is(err, context.DeadlineExceeded) {
		code = wire.CodeUnavailable // the client asks again: a switch-over
	}
	reply := nats.NewMsg(msg.Reply)
	reply.Header.Set(wire.ErrorCodeHeader, code)
	reply.Header.Set(wire.ErrorHeader, err.Error())
	if err := msg.RespondMsg(reply); err != nil {
		m.log.Debug("mono: respond failed", "tag", tag, "err", err)
	}
	m.observe(tag, code, 0, start)
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
	if c, ok := m.lease.(io.Closer); ok {
		_ = c.Close()
	}
}

func (t *monoTag) close() {
	t.stop()
	<-t.done
	t.mu.Lock()
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
		t.sub = nil
	}
	t.mu.Unlock()
}

// MonoLeading lists the monotonic tags this node leads now, sorted.
func (n *Node) MonoLeading() []string { return n.mono.Load().leadingTags() }

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

// observe counts one answered request of a monotonic tag in the metrics.
func (m *monoServer) observe(tag, code string, ids int, start time.Time) {
	m.n.met.observe(responder.Observation{Engine: "mono", Tag: tag, Code: code, IDs: ids, Took: m.n.clock.Since(start)})
}

// askMono fills dst with ids of a monotonic tag for the HTTP API: its
// leader may be another node, so it asks leaf.mono.<tag> over NATS, again
// after no responder or a 503 (a switch-over), until ctx ends. (The Go
// client does the same; node cannot import it.)
func (n *Node) askMono(ctx context.Context, tag wire.Tag, dst []int64) error {
	backoff := 10 * time.Millisecond
	for {
		reply, err := n.nc.RequestMsgWithContext(ctx, wire.NewRequest(wire.MonoPrefix+tag.String(), len(dst), true))
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
