package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/wire"
)

// self reports whether an answer of node (instance) is this process's own.
// A node of an older version sends no instance: its name decides.
func (s *Set) self(node, instance string) bool {
	if instance == "" {
		return node == s.cfg.Name
	}
	return instance == s.cfg.Instance
}

// Describe names a live node for an error or a log line: its name, and its
// process, host and start where it says them.
func Describe(st wire.NodeStatus) string {
	d := "node " + st.Node
	if st.PID != 0 {
		d += fmt.Sprintf(" (pid %d on host %s", st.PID, st.Host)
		if st.Started != 0 {
			d += ", started " + time.Unix(0, st.Started).UTC().Format(time.RFC3339)
		}
		d += ")"
	}
	return d
}

// Statuses asks the live nodes of the scope for their status
// (Scope.Status()) and
// returns every answer but this process's own. It waits for every member's
// answer (ErrSilent if one listed and alive stays silent) and gathers for
// a window only while the members' list cannot be trusted to hold every
// live node.
func (s *Set) Statuses(ctx context.Context) ([]wire.NodeStatus, error) {
	var out []wire.NodeStatus
	err := s.gather(ctx, s.cfg.Scope.Status(), s.window(), nil, func(m *nats.Msg) {
		var st wire.NodeStatus
		if json.Unmarshal(m.Data, &st) == nil && st.Node != "" && !s.self(st.Node, st.Instance) {
			out = append(out, st)
		}
	})
	return out, err
}

// CheckName refuses (ErrNameTaken) a name a live process other than this
// one answers under: two live nodes never share a name. Every check
// against the live nodes tells this process from the others by instance,
// and a second process under this name would pass the checks that keep
// ids from repeating unseen otherwise. It asks through Statuses; a check
// that could not ask is ErrSilent (going on unasked would let a second
// process under this name pass).
func (s *Set) CheckName(ctx context.Context) error {
	sts, err := s.Statuses(ctx)
	if err != nil {
		return fmt.Errorf("%w: asking whether a live node has this name: %v", ErrSilent, err)
	}
	for _, st := range sts {
		if st.Node == s.cfg.Name {
			return fmt.Errorf("%w: a live %s answers under this node's name", ErrNameTaken, Describe(st))
		}
	}
	return nil
}

// Recent is Statuses asked at most once a second: the checks of one
// worker-id registration share an answer.
func (s *Set) Recent(ctx context.Context) ([]wire.NodeStatus, error) {
	s.recent.mu.Lock()
	defer s.recent.mu.Unlock()
	if s.recent.at.IsZero() || s.cfg.Clock.Since(s.recent.at) > time.Second {
		s.recent.seen, s.recent.err = s.Statuses(ctx)
		s.recent.at = s.cfg.Clock.Now()
	}
	return s.recent.seen, s.recent.err
}

// Holder is the live node other than this process that reports worker as
// its worker id, or as the one it registers (false if none does). It asks
// afresh, not from Recent's cache: a worker id is served only under a
// fenced claim, and the caller's Config.Status must report worker as its
// claim before it calls. Of two nodes that register one worker id at the
// same moment, the one whose question reached the other before that one's
// claim asks after that claim and sees it: at least one of the two
// refuses (both may; never neither).
func (s *Set) Holder(ctx context.Context, worker int64) (wire.NodeStatus, bool, error) {
	s.recent.mu.Lock()
	s.recent.at = time.Time{}
	s.recent.mu.Unlock()
	sts, err := s.Recent(ctx)
	if err != nil {
		return wire.NodeStatus{}, false, err // one of them may hold it: ask again later
	}
	for _, st := range sts {
		if st.Snow.Holds(worker) {
			return st, true, nil
		}
	}
	return wire.NodeStatus{}, false, nil
}

// Lease is the highest time lease a live node other than this process
// reports for worker among the worker ids it held and lost (zero if
// none): a worker id is served only above its last time lease, also when
// its registry lost the record (snowflake.SourceConfig.PeerLease).
func (s *Set) Lease(ctx context.Context, worker int64) (time.Time, error) {
	sts, err := s.Recent(ctx)
	if err != nil {
		return time.Time{}, err // the registration is tried again
	}
	var high int64
	for _, st := range sts {
		if st.Snow == nil {
			continue
		}
		for _, wl := range st.Snow.Past {
			if wl.Worker == worker {
				high = max(high, wl.Until)
			}
		}
	}
	if high == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, high), nil
}

// Other names a live node of the scope other than this process that
// answers Scope.Status() within a second ("" if none does). A node hands
// unserved ids back to its store only while it is alone: a live peer may
// have heard its floors and would reserve above them, skipping the ids
// handed back, and a range is reserved above every floor any node has
// seen. It gathers for its window, not waiting for members: a peer missed
// here keeps this node's floors (never an id twice).
func (s *Set) Other(ctx context.Context) (string, error) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	sts, err := ask.Status(actx, s.cfg.Conn, s.cfg.Scope, time.Second)
	if err != nil {
		return "", err
	}
	for _, st := range sts {
		if !s.self(st.Node, st.Instance) {
			return st.Node, nil
		}
	}
	return "", nil
}

// clockWindow is how long a starting node gathers the live nodes' clocks
// (Scope.Time()).
const clockWindow = 500 * time.Millisecond

// Clocks is ask.PeerClocks for a starting node: it gathers for clockWindow
// at most, and ends as soon as every other member answered when the
// members' list holds every live node (members.complete): a lone node does
// not wait the window out. Only serving nodes answer the time; the clock
// check guards against a clock far off, not against duplicates.
func (s *Set) Clocks(ctx context.Context, now func() time.Time) (ask.PeerClock, error) {
	nc := s.cfg.Conn
	if s.members == nil {
		return ask.PeerClocks(ctx, nc, s.cfg.Scope, clockWindow, now)
	}
	others, complete, err := s.members.list(ctx, nil)
	if err != nil || !complete {
		return ask.PeerClocks(ctx, nc, s.cfg.Scope, clockWindow, now)
	}
	expect := make(map[string]bool, len(others))
	for _, name := range others {
		expect[name] = true
	}
	gctx, cancel := context.WithTimeout(ctx, clockWindow)
	defer cancel()
	var c ask.ClockSum
	sent := now()
	_, err = ask.GatherExpect(gctx, nc, s.cfg.Scope.Time(), 0, expect, func(m *nats.Msg) string {
		var t wire.NodeTime
		_ = json.Unmarshal(m.Data, &t)
		return t.Node
	}, func(m *nats.Msg) { c.Add(m, sent, now(), "") })
	if err != nil {
		return ask.PeerClock{}, fmt.Errorf("peer clocks: %w", err)
	}
	return c.PeerClock(), nil
}
