package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

// Floors is what HearFloors needs of the node's own floors.
type Floors struct {
	// Store names the store's incarnation ("" for a store without one,
	// MySQL): announcements and answers of another incarnation do not
	// count, as floors of a store replaced since say nothing of this one.
	Store string
	// All and Modes are this node's floors and modes of every tag it kept
	// (answered on Scope.Floors()); nil when it keeps none (no floor
	// file): it then does not answer.
	All   func() map[string]int64
	Modes func() map[string]string
	// MaxTags bounds the tags heard (at least 10,000).
	MaxTags int
}

// heard keeps the highest floor each tag's other nodes announced on
// leaf.floor.<tag>, and the mode they serve it in.
type heard struct {
	self   func(node, instance string) bool
	prefix string // Scope.FloorAnnouncePrefix()
	store  string
	max    int
	mu     sync.Mutex
	floors map[string]int64
	modes  map[string]string // each tag's mode as peers announced it
	sub    *nats.Subscription
	all    *nats.Subscription // Scope.Floors()

	// again asks the regather goroutine to gather the live nodes' floors
	// once more (Reconnected); cancel and wg end it (close).
	again chan struct{}
	// lost counts the connection's losses (Disconnected, Reconnected);
	// gathered is the count when the last gather that succeeded began.
	// While gathered < lost an announcement may have been missed: Floor
	// refuses (ErrFloorsStale).
	lost, gathered atomic.Uint64
	cancel         context.CancelFunc
	wg             sync.WaitGroup
	closed         sync.Once
}

// floorsWindow is how long a starting node gathers its peers' floors
// (Scope.Floors()) while the members' list cannot be trusted.
const floorsWindow = 250 * time.Millisecond

// HearFloors subscribes to the other nodes' floor announcements
// (Scope.FloorAnnouncePrefix()), answers Scope.Floors() with f.All and
// f.Modes, and asks every live member
// that keeps floors for theirs, waiting for each one's answer (ErrSilent
// if one stays silent: the caller asks again). It protects "a range is
// reserved above every floor any node has seen" and "a tag is served in
// one mode": a node that starts after its peers' last loads knows their
// floors and modes (Floor, Mode) before it reserves a range. Every store
// takes part: a store keeps a tag's mode in a row an operator can delete,
// and only the nodes that served the tag remember it then.
func (s *Set) HearFloors(ctx context.Context, f Floors) error {
	nc := s.cfg.Conn
	sc := s.cfg.Scope
	h := &heard{self: s.self, prefix: sc.FloorAnnouncePrefix(), store: f.Store, max: max(f.MaxTags, 10_000), floors: map[string]int64{}, modes: map[string]string{},
		again: make(chan struct{}, 1)}
	var err error
	h.sub, err = nc.Subscribe(sc.FloorAnnouncePrefix()+"*", h.announced)
	if err != nil {
		return err
	}
	if f.All != nil {
		h.all, err = nc.Subscribe(sc.Floors(), func(m *nats.Msg) {
			floors, modes := h.known(f.All(), f.Modes())
			b, _ := json.Marshal(wire.NodeFloors{Node: s.cfg.Name, Instance: s.cfg.Instance, Store: h.store, Floors: floors, Modes: modes})
			if err := m.Respond(b); err != nil {
				s.cfg.Log.Warn("peers: answering "+m.Subject, "err", err)
			}
		})
		if err != nil {
			h.close()
			return err
		}
		if err := nc.Flush(); err != nil {
			h.close()
			return err
		}
		s.members.set(ctx, func(m *wire.Member) { m.Floors = true })
	}
	if err := s.gatherFloors(ctx, h); err != nil {
		// Any failure of the gather: a node that went on without its
		// peers' floors could take a range below one of them.
		h.close()
		return fmt.Errorf("%w: asking the live nodes for their floors: %v", ErrSilent, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.wg.Go(func() { s.regather(rctx, h) })
	s.heard = h
	// From now on a loss of the connection makes the floors stale, and the
	// reconnect gathers them again: announcements sent while this node
	// was away never reach it.
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil {
			s.cfg.Log.Warn("nats disconnected", "err", err)
		}
		s.Disconnected()
	})
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		s.cfg.Log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		s.Reconnected()
	})
	return nil
}

// gatherFloors asks every live member that keeps floors for all of them
// (Scope.Floors()) and raises h with their answers.
func (s *Set) gatherFloors(ctx context.Context, h *heard) error {
	return s.gather(ctx, s.cfg.Scope.Floors(), floorsWindow, func(m wire.Member) bool { return m.Floors }, func(m *nats.Msg) {
		var nf wire.NodeFloors
		if json.Unmarshal(m.Data, &nf) != nil || nf.Store != h.store || s.self(nf.Node, nf.Instance) {
			return
		}
		for tag, f := range nf.Floors {
			h.raise(tag, f, nf.Modes[tag])
		}
	})
}

// Reconnected tells the Set that its connection to NATS was made again:
// the announcements (leaf.floor.<tag>) sent while it was away never reach
// it, so it gathers the live nodes' floors again, as at start, in the
// background (until every live member answered). A no-op before
// HearFloors; it does not block (nats.ReconnectHandler).
//
// This keeps "a range is reserved above every floor any node has seen"
// (I1, docs/protocol.md) across a lost announcement: without it a peer's
// floor missed while disconnected stays unknown until the peer's next
// range, and a max_id lowered meanwhile (twice, past the bucket's history)
// would grant this node ids the peer served.
func (s *Set) Reconnected() {
	if s == nil || s.heard == nil {
		return
	}
	s.heard.lost.Add(1)
	select {
	case s.heard.again <- struct{}{}:
	default: // one is pending already: it gathers after this reconnect
	}
}

// Disconnected tells the Set that its connection to NATS was lost:
// announcements sent from now on may never reach it, so Floor refuses
// until a gather after the reconnect (Reconnected) has succeeded. It does
// not block (nats.DisconnectErrHandler).
func (s *Set) Disconnected() {
	if s == nil || s.heard == nil {
		return
	}
	s.heard.lost.Add(1)
}

// ErrFloorsStale is Floor's refusal while the peers' floors are not known
// to be current: the connection to NATS was lost and the live nodes have
// not all been asked again since.
var ErrFloorsStale = errors.New("the live nodes' floors are not known since the connection to NATS was lost; asking them again")

// regatherRetry is how long regather waits after a gather that failed (a
// silent member, the members' list unreadable) before it asks again.
const regatherRetry = time.Second

// regather gathers the live nodes' floors once more after each
// Reconnected, asking again until a gather succeeds; it ends with ctx.
func (s *Set) regather(ctx context.Context, h *heard) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.again:
		}
		for {
			began := h.lost.Load()
			err := s.gatherFloors(ctx, h)
			if err == nil {
				h.gathered.Store(max(h.gathered.Load(), began))
			}
			if err == nil || ctx.Err() != nil {
				break
			}
			s.cfg.Log.Warn("peers: asking the live nodes for their floors again after a reconnect", "err", err)
			if clock.Sleep(ctx, s.cfg.Clock, regatherRetry) != nil {
				return
			}
		}
	}
}

// announced records one announcement (wire.FloorAnnounce). This process's
// own are not a peer's; another process under this node's name (two
// nodes started at once under one name) is a peer.
func (h *heard) announced(m *nats.Msg) {
	tag := strings.TrimPrefix(m.Subject, h.prefix)
	var a wire.FloorAnnounce
	if json.Unmarshal(m.Data, &a) != nil || a.Store != h.store || h.self(a.Node, a.Instance) {
		return
	}
	h.raise(tag, a.Floor, a.Mode)
}

// raise records a peer's floor of tag, and the mode it serves the tag in
// ("" if it did not say).
// known is what this node answers on Scope.Floors(): its own floors
// and modes, and those it heard from its peers (its own mode of a tag
// first). Passing on what it heard keeps I1 and I4 (docs/protocol.md)
// while the nodes that served a tag are replaced one at a time onto new
// data directories: a store's mode row can be deleted, MySQL keeps no other
// copy, and the knowledge lives on only as long as each starting node
// hears it from one that is still alive.
func (h *heard) known(own map[string]int64, ownModes map[string]string) (map[string]int64, map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	floors := make(map[string]int64, len(own)+len(h.floors))
	modes := make(map[string]string, len(ownModes)+len(h.modes))
	for tag, f := range h.floors {
		floors[tag] = f
	}
	for tag, m := range h.modes {
		modes[tag] = m
	}
	for tag, f := range own {
		floors[tag] = max(floors[tag], f)
	}
	for tag, m := range ownModes {
		if m != "" {
			modes[tag] = m
		}
	}
	return floors, modes
}

func (h *heard) raise(tag string, floor int64, mode string) {
	if _, err := wire.ParseTag(tag); err != nil || floor <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.floors[tag]; ok || len(h.floors) < h.max {
		h.floors[tag] = max(cur, floor)
		if mode != "" {
			h.modes[tag] = mode
		}
	}
}

func (h *heard) close() {
	if h == nil {
		return
	}
	h.closed.Do(func() {
		if h.cancel != nil {
			h.cancel()
		}
		h.wg.Wait()
		for _, s := range []*nats.Subscription{h.sub, h.all} {
			if s != nil {
				_ = s.Unsubscribe()
			}
		}
	})
}

// Floor is the highest floor of tag a peer announced or answered (0 if
// none, or before HearFloors): the engine reserves no range below it, as a
// range is reserved above every floor any node has seen. ErrFloorsStale
// from a loss of the connection until the live nodes were all asked again
// (Disconnected, Reconnected): a floor announced meanwhile may be missing.
func (s *Set) Floor(tag string) (int64, error) {
	if s == nil || s.heard == nil {
		return 0, nil
	}
	if s.heard.gathered.Load() < s.heard.lost.Load() {
		return 0, ErrFloorsStale
	}
	s.heard.mu.Lock()
	defer s.heard.mu.Unlock()
	return s.heard.floors[tag], nil
}

// Mode is the mode peers announced for tag ("" if none did): a tag is
// served in one mode.
func (s *Set) Mode(tag string) string {
	if s == nil || s.heard == nil {
		return ""
	}
	s.heard.mu.Lock()
	defer s.heard.mu.Unlock()
	return s.heard.modes[tag]
}

// Announce publishes this node's new floor of tag (end, the range it just
// reserved) and the mode it serves the tag in, with its store's
// incarnation: every node that hears it reserves above end. A no-op before
// HearFloors. It does not block (a NATS publish).
func (s *Set) Announce(tag string, end int64, mode string) {
	if s == nil || s.heard == nil {
		return
	}
	b, _ := json.Marshal(wire.FloorAnnounce{Node: s.cfg.Name, Instance: s.cfg.Instance, Store: s.heard.store, Floor: end, Mode: mode})
	_ = s.cfg.Conn.Publish(s.cfg.Scope.FloorAnnouncePrefix()+tag, b)
}

// CreateWindow is how long a check before an auto-create gathers the live
// nodes' floors of the tag while the members' list cannot be trusted; the
// first request of a new tag waits for a range anyway.
const CreateWindow = 150 * time.Millisecond

// HighestFloor is the highest floor of tag among the live nodes of the
// scope (Scope.FloorPrefix()+tag) and this node's own (Config.Floor), and the node
// that has it. It waits past window for every member that serves, so a
// slow peer's floor is not taken for none: a range is reserved above every
// floor any node has seen. A tag created or restarted below it, or
// created afresh above 0 while a node holds ids of it (the store lost
// it), would repeat ids.
func (s *Set) HighestFloor(ctx context.Context, tag wire.Tag, window time.Duration) (high int64, who string, err error) {
	err = s.gather(ctx, s.cfg.Scope.FloorPrefix()+tag.String(), window, func(m wire.Member) bool { return m.Serving }, func(m *nats.Msg) {
		var f wire.NodeFloor
		if json.Unmarshal(m.Data, &f) == nil && f.Tag == tag.String() && f.Floor > high {
			high, who = f.Floor, f.Node
		}
	})
	// This node's own floor counts as a live node's: the gather waits for
	// the other members only (and, with a complete list, for no window in
	// which this node's own answer would arrive).
	if f := s.cfg.Floor(tag.String()); f > high {
		high, who = f, s.cfg.Name
	}
	return high, who, err
}
