package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

var (
	// ErrSilent: a live node listed in the members bucket
	// (Config.Scope.Members()) did not answer a check in time, or the
	// list could not be read. It passes by itself: the caller asks again.
	ErrSilent = errors.New("live nodes did not answer")
	// ErrNameTaken: another live process answers under this node's name.
	ErrNameTaken = errors.New("name taken by a live node")
)

// Config is what a Set needs: a connection and who this process is.
type Config struct {
	// Conn is the node's NATS connection. Required.
	Conn *nats.Conn
	// Name is the node's name (wire.NodeStatus.Node). Required.
	Name string
	// Instance tells this process from any other under the same name
	// (NewInstance). Required.
	Instance string
	// Clock times the members' renewals and the status cache; the real
	// clock when nil.
	Clock clock.Clock
	// Log gets the warnings; slog.Default when nil.
	Log *slog.Logger
	// Replicas of the members bucket when Join makes it (0: 1).
	Replicas int
	// OwnServer: the node runs the NATS server that holds the members
	// bucket (an embedded one on its locked data directory).
	// A bucket it made or found at its join then lists every live node at
	// once (members.complete).
	OwnServer bool
	// Status is what the node answers on Scope.Status() from Start
	// until Started (its responder answers from then on). It must be safe
	// from any goroutine. Required.
	Status func() wire.NodeStatus
	// Scope is the node's region (wire.Scope, "" without regions): the
	// members bucket, the floors, the status and the clocks it asks and
	// answers are its region's only, whose floors count the same local
	// numbers in the same store.
	Scope wire.Scope
	// Floor is this node's own floor of a tag (the highest range end it
	// received, 0: none), answered on Scope.FloorPrefix()+tag from Start
	// until StopFloors and counted by HighestFloor. It must be safe from
	// any goroutine. Required.
	Floor func(tag string) int64
}

// Set is this process's membership among the live nodes and what it heard
// of the others. Safe for concurrent use once Start returned; Join and
// HearFloors run before the checks that need them.
type Set struct {
	cfg     Config
	members *members // nil before Join, and without JetStream

	early    []*nats.Subscription // Scope.Status() (and, scoped, wire.StatusSubject) until Started
	floorAns *nats.Subscription   // Scope.FloorPrefix()+"*" until StopFloors
	heard    *heard               // floors heard; nil before HearFloors

	recent struct { // Recent's cache
		mu   sync.Mutex
		at   time.Time
		seen []wire.NodeStatus
		err  error
	}
	stopped sync.Once // StopFloors
}

// NewInstance is a random id of this process (wire.NodeStatus.Instance).
func NewInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// New makes a Set; it does no I/O. Start answers for it.
func New(cfg Config) (*Set, error) {
	if cfg.Conn == nil || cfg.Name == "" || cfg.Instance == "" || cfg.Status == nil || cfg.Floor == nil {
		return nil, errors.New("peers: Conn, Name, Instance, Status and Floor are required")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Replicas = max(cfg.Replicas, 1)
	return &Set{cfg: cfg}, nil
}

// Instance is this process's instance id (Config.Instance).
func (s *Set) Instance() string { return s.cfg.Instance }

// Start answers Scope.Status() (and, scoped, wire.StatusSubject, which
// leafctl status asks) with Config.Status and Scope.FloorPrefix()+<tag>
// with Config.Floor, and flushes the
// subscriptions before it returns. It runs before the node asks anyone and
// before it joins the members, so two live nodes never share a name and no
// range is reserved below a floor any node has seen: of two nodes that
// start together, each one's question reaches the other's answerer, and
// every member whose record says Serving answers for its floors (a
// restarting node holds ranges from its floor file on, long before its
// responder runs; an asker takes the highest answer of each node).
func (s *Set) Start(ctx context.Context) error {
	nc := s.cfg.Conn
	sc := s.cfg.Scope
	statuses := []string{sc.Status()}
	if sc.Status() != wire.StatusSubject {
		statuses = append(statuses, wire.StatusSubject)
	}
	for _, subj := range statuses {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			if b, err := json.Marshal(s.cfg.Status()); err == nil {
				_ = m.Respond(b)
			}
		})
		if err != nil {
			return fmt.Errorf("answer %s while starting: %w", subj, err)
		}
		s.early = append(s.early, sub)
	}
	var err error
	s.floorAns, err = nc.Subscribe(sc.FloorPrefix()+"*", func(m *nats.Msg) {
		tag, err := wire.ParseTag(strings.TrimPrefix(m.Subject, sc.FloorPrefix()))
		if err != nil {
			return // the responder, once it runs, answers a bad tag with a 400
		}
		b, _ := json.Marshal(wire.NodeFloor{Node: s.cfg.Name, Instance: s.cfg.Instance, Tag: tag.String(), Floor: s.cfg.Floor(tag.String())})
		if err := m.Respond(b); err != nil {
			s.cfg.Log.Warn("peers: answering "+m.Subject, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("answer %s: %w", sc.FloorPrefix()+"*", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("answer %s while starting: %w", sc.Status(), err)
	}
	return nil
}

// Join writes this process's key in the members bucket (Scope.Members(),
// made on disk if there is none) and keeps it fresh until Leave, so that every
// check of every other node waits for this node's answers. dead, if not
// "", is the instance of a process known to be dead (the one that ran
// before on this node's locked data directory): its key is deleted at
// once. A NATS without JetStream leaves the node no member, with a
// warning, and the checks gather for their window only. Any other error
// leaves it no member: the caller tries again.
func (s *Set) Join(ctx context.Context, dead string) error {
	m, err := joinMembers(ctx, s.cfg.Conn, s.cfg.Scope.Members(), s.cfg.Replicas,
		wire.Member{Node: s.cfg.Name, Instance: s.cfg.Instance, Serving: true}, s.cfg.Clock, s.cfg.Log)
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		s.cfg.Log.Warn("members: no JetStream: the checks against live nodes gather for their window only", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	m.ownServer = s.cfg.OwnServer
	s.members = m
	m.dropDead(ctx, dead)
	return nil
}

// Members reports whether this node is a member (Join wrote its key): its
// checks then wait for every listed member, and need no second look.
func (s *Set) Members() bool { return s != nil && s.members != nil }

// Started ends Start's status answers once the caller's responder answers
// them (Scope.Status(), and wire.StatusSubject). The flush puts the
// responder's subscriptions on the server first, and the drain answers what the early one already holds: a
// question that arrives in between is answered by one of the two, not
// lost (lost, two nodes could serve one worker id).
func (s *Set) Started(ctx context.Context) error {
	if s.early == nil {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.cfg.Conn.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("answer %s: %w", s.cfg.Scope.Status(), err)
	}
	var errs []error
	for _, sub := range s.early {
		errs = append(errs, sub.Drain())
	}
	return errors.Join(errs...)
}

// StopFloors stops hearing and answering floors (announcements,
// Scope.Floors(), Scope.FloorPrefix()+<tag>); a second call does nothing.
// A node calls it before it hands unserved ids back to its store: no node
// may learn its floors from then on, or it would reserve above ids handed
// back. Floor and Mode keep what was heard.
func (s *Set) StopFloors() {
	if s == nil {
		return
	}
	s.stopped.Do(func() {
		s.heard.close()
		if s.floorAns != nil {
			_ = s.floorAns.Unsubscribe()
		}
	})
}

// Leave removes this process's key from the members bucket and stops
// renewing it: the others stop waiting for its answers at once. A node
// leaves before it stops answering.
func (s *Set) Leave(ctx context.Context) error {
	if s == nil {
		return nil
	}
	return s.members.close(ctx)
}

// Close leaves the members and stops every answer; idempotent.
func (s *Set) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.Leave(ctx)
	s.StopFloors()
	for _, sub := range s.early {
		_ = sub.Unsubscribe()
	}
	return err
}

// window is how long a status check gathers without a complete list:
// statusWindow plus twice this node's round trip to its server (a question
// and its answers cross the node's link twice: a node 200 ms from NATS
// hears no peer in 300 ms), at most 5 s.
func (s *Set) window() time.Duration {
	rtt, err := s.cfg.Conn.RTT()
	if err != nil {
		return statusWindow
	}
	return min(statusWindow+2*rtt, 5*time.Second)
}

// statusWindow is how long the node gathers the live nodes' status when it
// checks its name and its worker id against them.
const statusWindow = 300 * time.Millisecond
