package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Homes keeps a monotonic tag in one region, its home (docs/protocol.md,
// I6). Each region keeps its tags in its own store, so nothing in a store
// stops a second region from creating a monotonic tag too; its nodes
// would then elect a second leader, which subscribes leaf.mono.<tag> as
// the first does (gateways carry a plain subscription to every region),
// and a caller would take whichever answer came first: ids out of order.
// Ids stay unique (each region's ids lie in its own remainder class), so
// this guards the order only, and only on the admin path: a create or a
// restart asks the other regions (wire.RegionTagSubject) before it writes,
// never a request for ids.
//
// A create of a monotonic tag goes ahead only when every other region
// answered and none holds the tag: a row, a create under way, or a
// leader of it without a row (its row deleted by hand: the leader serves
// the rest of its ranges until its node sees the row gone). A region where
// the tag was deleted holds nothing else (the stores keep no mode a Get
// can read), but a restart there asks first too. The creating node
// says it is creating before it asks, and until its write is done: of two
// creates in two regions at one moment, each says so before it asks, so
// the later to say so hears the earlier, and a create that hears another
// under way refuses, whichever region is lower (both may refuse; the
// operator asks again). A create of another mode refuses a tag that is
// monotonic or in another mode elsewhere, from the regions that answered:
// a region away is not waited for (such a tag's ids cannot repeat across
// regions; its mode is kept the same for the callers' sake). A restart
// refuses a tag monotonic elsewhere (or being created so).
type Homes struct {
	cfg HomesConfig

	mu       sync.Mutex
	creating map[string]segment.Mode // tags this node is creating, between its question and its write
}

// HomesConfig is what NewHomes needs.
type HomesConfig struct {
	Conn   *nats.Conn // required
	Count  int        // the deployment's region count, > 1
	ID     int        // this region's id
	Region string     // this region's name
	Node   string     // this node's name
	// Window is how long a question waits for the other regions'
	// answers beyond twice the node's round trip (DefaultWindow when 0).
	Window time.Duration
	// Store is this region's store (its Get: a row, or an error wrapping
	// segment.ErrUnknownTag, segment.ErrTagDeleted, …); a node without
	// one has no Homes.
	Store interface {
		Get(ctx context.Context, tag wire.Tag) (segment.Tag, error)
	}
	// Leader, if set, names the node of this region that holds tag's
	// monotonic lease ("" for none): asked where the store has no row of
	// the tag, since a leader serves the rest of its ranges after its row
	// is deleted by hand (mono.Server.Holder).
	Leader func(ctx context.Context, tag string) (string, error)
	// MonoFloor, if set, is this node's floor of a tag it served or heard
	// served as monotonic (MonoFloor below), 0 for another: a monotonic
	// create or any restart elsewhere starts above every region's.
	MonoFloor func(tag string) int64
}

// MonoFloor is a node's HomesConfig.MonoFloor: the highest range end of
// tag in its floors and those it heard announced (peerFloor), where its
// floors record the tag as monotonic or its peers announced it so
// (peerMode); 0 otherwise. A monotonic tag's ids rise across regions; a
// segment tag's need not (each region's ids lie in a class of its own).
func MonoFloor(floors segment.Floors, peerFloor func(string) (int64, error), peerMode func(string) string) func(tag string) int64 {
	mono := string(segment.KindMono)
	return func(tag string) int64 {
		var m string
		if k, ok := floors.(segment.ModeKeeper); ok {
			m, _ = k.Mode(tag)
		}
		if m != mono && peerMode(tag) != mono {
			return 0
		}
		f, _ := peerFloor(tag) // stale: those heard still count
		return max(floors.Floor(tag), f)
	}
}

// NewHomes returns the Homes of a node with regions and a store; nil
// (which answers nothing and allows everything) for a deployment of one
// region or a node without a store.
func NewHomes(cfg HomesConfig) *Homes {
	if cfg.Count <= 1 || cfg.Store == nil {
		return nil
	}
	return &Homes{cfg: cfg, creating: map[string]segment.Mode{}}
}

// LeadCheck is NewHomes(cfg).Lead, for mono.ServerConfig.MayLead; nil
// where NewHomes is nil (one region: there is no one to ask).
func LeadCheck(cfg HomesConfig) func(context.Context, wire.Tag) error {
	h := NewHomes(cfg)
	if h == nil {
		return nil
	}
	return h.Lead
}

// Subject is the subject this node answers on, wildcard for the tag.
func (h *Homes) Subject() string { return wire.RegionTagSubject(h.cfg.ID, "*") }

// Answer is this node's answer for tag (the last token of subject).
func (h *Homes) Answer(ctx context.Context, subject string) wire.RegionTag {
	name := subject[strings.LastIndexByte(subject, '.')+1:]
	a := wire.RegionTag{Node: h.cfg.Node, Region: h.cfg.Region, ID: h.cfg.ID}
	if h.cfg.MonoFloor != nil {
		a.Floor = h.cfg.MonoFloor(name)
	}
	h.mu.Lock()
	m, ok := h.creating[name]
	h.mu.Unlock()
	if ok {
		a.Creating = true
		a.Mode, a.Width, a.KeyID = string(m.Kind), m.Width, m.KeyID
		return a
	}
	tag, err := wire.ParseTag(name)
	if err != nil {
		a.Err = err.Error()
		return a
	}
	t, err := h.cfg.Store.Get(ctx, tag)
	switch {
	case err == nil:
		a.Has = true
		m := t.Mode
		if m.IsSegment() {
			m.Kind = segment.KindSegment
		}
		a.Mode, a.Width, a.KeyID = string(m.Kind), m.Width, m.KeyID
	case errors.Is(err, segment.ErrUnknownTag), errors.Is(err, segment.ErrTagDeleted):
		if h.cfg.Leader == nil {
			break
		}
		who, err := h.cfg.Leader(ctx, name)
		if err != nil {
			a.Err = err.Error()
		} else if who != "" {
			a.Leader, a.Mode = who, string(segment.KindMono)
		}
	default:
		a.Err = err.Error()
	}
	return a
}

// Create checks, before this node creates tag in mode m (normalized), that
// no other region forbids it (see Homes). On success the node counts as
// creating tag until release is called, which must be once the store's
// create returned, whatever it returned.
//
// undeployed are region ids the operator states have no nodes and no store
// yet: a monotonic create goes ahead without their answer (a region that
// joins later asks this one before it creates the tag). A region id
// stated so that is only away (cut off, down) may hold the tag: the
// operator's promise.
func (h *Homes) Create(ctx context.Context, tag wire.Tag, m segment.Mode, maxID int64, undeployed []int) (release func(), err error) {
	if h == nil {
		return func() {}, nil
	}
	name := tag.String()
	h.mu.Lock()
	if _, ok := h.creating[name]; ok {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: tag %q: another create of it is under way on this node", segment.ErrTagExists, name)
	}
	h.creating[name] = m
	h.mu.Unlock()
	release = func() {
		h.mu.Lock()
		delete(h.creating, name)
		h.mu.Unlock()
	}
	if err := h.check(ctx, tag, m, maxID, false, undeployed); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// Restart checks, before this node restarts tag at floor, that no other
// region holds it as a monotonic tag (or is creating it so), and that
// floor is not below another region's floor of it as a monotonic tag (a
// tag moved back to this region keeps rising).
func (h *Homes) Restart(ctx context.Context, tag wire.Tag, floor int64) error {
	if h == nil {
		return nil
	}
	var m segment.Mode
	if h.cfg.MonoFloor != nil && h.cfg.MonoFloor(tag.String()) > 0 {
		// A tag this node served (or heard served) as monotonic comes
		// back so: refused, as its create would be, where another region
		// holds the tag in another mode.
		m.Kind = segment.KindMono
	}
	return h.check(ctx, tag, m, floor, true, nil)
}

// Lead checks, before this node serves monotonic tag as its leader, that
// no other region holds it as monotonic too (or is creating it so): the
// question of Restart, so that a second region that came to hold the tag
// by a way other than a create or restart through a node (two regions on
// one MySQL database, its region record deleted by hand; a row written by
// hand) does not answer it beside its home. It returns once every other
// region answered (one round trip across regions), or after the window
// (a region away is not waited for, nor one that could not be asked: the
// tag's home keeps serving through a cut or a lost connection).
func (h *Homes) Lead(ctx context.Context, tag wire.Tag) error {
	if h == nil {
		return nil
	}
	err := h.checkBy(ctx, tag, segment.Mode{}, 0, true, nil, true)
	if errors.Is(err, segment.ErrUnavailable) {
		return nil // no one could be asked: as regions away, not waited for
	}
	return err
}

func (h *Homes) check(ctx context.Context, tag wire.Tag, m segment.Mode, maxID int64, restart bool, undeployed []int) error {
	return h.checkBy(ctx, tag, m, maxID, restart, undeployed, false)
}

// checkBy is check; with lead (Lead's question), it asks only until
// every other region answered once, and only rows and leaders count: a
// create under way elsewhere asks this region too, whose row refuses it,
// so it must not keep the tag's home from serving (a create retried in a
// loop did, 10 s at a time).
func (h *Homes) checkBy(ctx context.Context, tag wire.Tag, m segment.Mode, maxID int64, restart bool, undeployed []int, lead bool) error {
	mono := m.Kind == segment.KindMono
	answers, missing, err := h.ask(ctx, tag, lead)
	if err != nil {
		return fmt.Errorf("%w: tag %q: asking the other regions: %w", segment.ErrUnavailable, tag, err)
	}
	all := slices.Clone(answers)
	answers = slices.DeleteFunc(answers, func(a wire.RegionTag) bool {
		return !a.Holds() && (lead || !a.Creating) // a floor alone: below
	})
	for _, a := range answers {
		where := fmt.Sprintf("in region %s (id %d, node %s)", a.Region, a.ID, a.Node)
		had := segment.Mode{Kind: segment.Kind(a.Mode), Width: a.Width, KeyID: a.KeyID}
		switch {
		case (a.Holds() || a.Creating) && had.Kind == segment.KindMono:
			if a.Creating {
				return fmt.Errorf("%w: tag %q is being created as monotonic %s at this moment: a monotonic tag lives in one region only; create it in one region (ask again there); nothing done",
					segment.ErrTagExists, tag, where)
			}
			if !a.Has {
				return fmt.Errorf("%w: tag %q has no row in region %s (id %d), but node %s leads it there as monotonic and may serve it still: a monotonic tag lives in one region only; ask again once it stops leading it (within a minute of the row's deletion); nothing done",
					segment.ErrTagExists, tag, a.Region, a.ID, a.Leader)
			}
			return fmt.Errorf("%w: tag %q is monotonic %s, its home: a monotonic tag lives in one region only (callers of every region reach it there); nothing done",
				segment.ErrTagExists, tag, where)
		case restart && !mono:
		case mono:
			what := "has the tag, " + had.String()
			if a.Creating {
				what = "is creating the tag as " + had.String() + " at this moment"
			}
			return fmt.Errorf("%w: tag %q: region %s (id %d, node %s) %s: a monotonic tag lives in one region only; nothing done",
				segment.ErrTagExists, tag, a.Region, a.ID, a.Node, what)
		case (a.Holds() || a.Creating) && !had.Equal(m):
			return fmt.Errorf("%w: tag %q is %s %s (asked for %s): a tag has one mode in every region; nothing created",
				segment.ErrMode, tag, had, where, m)
		}
	}
	if (mono || restart) && !lead {
		// A region's nodes that received ids of the tag as monotonic (a
		// tag whose row was deleted there by hand) keep their floors:
		// the tag's ids here must rise above theirs, as a create or
		// restart in one region must above its live nodes' floors.
		var high wire.RegionTag
		for _, a := range all {
			if a.Floor > high.Floor {
				high = a
			}
		}
		if maxID < high.Floor {
			how := "create it with a max_id of at least %d (leafctl tag create --max-id); nothing created"
			if restart {
				how = "restart it with a floor of at least %d (leafctl tag restart --floor); nothing done"
			}
			return fmt.Errorf("%w: tag %q: node %s of region %s (id %d) has received ids of it as a monotonic tag up to local number %d; its ids here must rise above those: "+how,
				segment.ErrBelowFloor, tag, high.Node, high.Region, high.ID, high.Floor, high.Floor)
		}
	}
	missing = slices.DeleteFunc(missing, func(id int) bool { return slices.Contains(undeployed, id) })
	if mono && len(missing) > 0 {
		return fmt.Errorf("%w: tag %q: no answer from region ids %v: a monotonic tag is created or restarted only while every region answers that it has no such tag (region ids with no nodes yet: name them undeployed, leafctl --undeployed-regions); nothing created",
			segment.ErrUnavailable, tag, missing)
	}
	return nil
}

// ask asks every other region what it holds of tag, twice (at once and
// half way through the window, as check does: the interest of a region's
// nodes may reach this server late), and returns the answers, the ids of
// the regions none of whose nodes answered with its store read, and an
// error when it could not ask. With lead it returns as soon as every other
// region answered once.
func (h *Homes) ask(ctx context.Context, tag wire.Tag, lead bool) ([]wire.RegionTag, []int, error) {
	nc := h.cfg.Conn
	w := windowOf(nc, h.cfg.Window, DefaultWindow)
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	send := func() error {
		for id := range h.cfg.Count {
			if id == h.cfg.ID {
				continue
			}
			if err := nc.PublishRequest(wire.RegionTagSubject(id, tag.String()), inbox, nil); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(); err != nil {
		return nil, nil, err
	}
	var answers []wire.RegionTag
	heard := map[int]bool{}
	start := time.Now()
	again, end := start.Add(w/2), start.Add(w)
	for {
		deadline := end
		if !again.IsZero() {
			deadline = again
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if again.IsZero() {
				var missing []int
				for id := range h.cfg.Count {
					if id != h.cfg.ID && !heard[id] {
						missing = append(missing, id)
					}
				}
				return answers, missing, nil
			}
			again = time.Time{}
			if err := send(); err != nil {
				return nil, nil, err
			}
			continue
		case errors.Is(err, nats.ErrNoResponders):
			continue
		case err != nil:
			return nil, nil, err
		}
		var a wire.RegionTag
		if json.Unmarshal(msg.Data, &a) != nil || a.Node == "" || a.ID == h.cfg.ID || a.ID < 0 || a.ID >= h.cfg.Count {
			continue
		}
		if a.Err == "" {
			heard[a.ID] = true
		}
		if a.Holds() || a.Creating || a.Floor > 0 {
			answers = append(answers, a)
		}
		if lead && len(heard) == h.cfg.Count-1 { // Lead's question: every other region answered once
			return answers, nil, nil
		}
	}
}
