package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

// ErrIDTaken: a node of another region answers on this node's region id.
var ErrIDTaken = errors.New("region id taken by another region")

// ErrRegionsDiffer: a node answers with a region count (--regions) other
// than this node's; 0 is a node without regions.
var ErrRegionsDiffer = errors.New("another node runs with another region count")

const (
	// DefaultWindow is how long a check waits for another region's answer
	// beyond twice this node's round trip to its server.
	DefaultWindow = 500 * time.Millisecond
	// DefaultPeriod is how often a running node checks its region id
	// again.
	DefaultPeriod = 10 * time.Second
	// maxWindow bounds a window stretched by a slow link to NATS.
	maxWindow = 5 * time.Second
)

// DefaultName is the region name of a node that sets none: the name of
// the NATS cluster nc is connected to, "" on a server without a cluster.
// A cluster name that is no region name (wire.CheckRegion) is an error:
// the node must be given one.
//
// A NATS cluster without a configured name (no JetStream, no gateways:
// both need one) gets a random name from each server, changed as its
// routes join; nothing on the client tells it from a real one, so such a
// cluster's nodes must be given their region name.
func DefaultName(nc *nats.Conn) (string, error) {
	name := nc.ConnectedClusterName()
	if name == "" {
		return "", nil
	}
	if err := wire.CheckRegion(name); err != nil {
		return "", fmt.Errorf("the NATS cluster name is no region name, give one: %w", err)
	}
	return name, nil
}

// Check asks the nodes of region id id (wire.RegionSubject) and refuses
// (ErrIDTaken) as soon as one of another region than name answers; in the
// same window it asks every node (wire.RegionsSubject) and refuses
// (ErrRegionsDiffer) as soon as one answers with a region count other
// than count. With count 0 (no regions) name and id are not used and only
// the count is checked. It waits window (DefaultWindow when 0) plus twice
// nc's round trip, at most 5 s, for such an answer; the answers of nodes
// that are still starting count too. An error other than these two means
// it could not ask.
func Check(ctx context.Context, nc *nats.Conn, name string, id, count int, window time.Duration) error {
	return check(ctx, nc, name, id, count, window, false)
}

// Config is what Start needs: the connection, the region, and who answers.
type Config struct {
	// Conn is the node's NATS connection. Required.
	Conn *nats.Conn
	// Count is the deployment's region count (--regions), 0 without
	// regions: then only the count is answered and checked, and Region
	// and ID are not used.
	Count int
	// Region is this node's region name (wire.CheckRegion). Required
	// when Count > 0.
	Region string
	// ID is this node's region id, >= 0.
	ID int
	// Node is the node's name; Instance its process (as in
	// wire.NodeStatus). Node is required.
	Node     string
	Instance string
	// Window is each check's window (DefaultWindow when 0); see Check.
	Window time.Duration
	// Period is how often the running node checks again (DefaultPeriod
	// when 0).
	Period time.Duration
	// Conflict is called once, from the Guard's goroutine, with the first
	// conflict a running check finds (an error wrapping ErrIDTaken or
	// ErrRegionsDiffer): the node stops serving what depends on the
	// region id and count. It must not call
	// Close. May be nil.
	Conflict func(error)
	// Clock times the period; the real clock when nil.
	Clock clock.Clock
	// Log gets the warnings and the conflict; slog.Default when nil.
	Log *slog.Logger
}

// Guard answers for this node's region id and checks it while the node
// runs.
type Guard struct {
	cfg     Config
	subs    []*nats.Subscription
	checked atomic.Bool // the start check passed: answers say Checked

	mu       sync.Mutex
	conflict error // the conflict a running check found; final

	ctx    context.Context // the running checks'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// Start answers wire.RegionSubject(cfg.ID) (with regions) and
// wire.RegionsSubject for this node, then checks the id and the count (as
// Check, every answer counting): an error wrapping ErrIDTaken means
// another region uses the id, one wrapping ErrRegionsDiffer that another
// node runs with another count, and the node must not start; any other
// error, that it could not ask (ctx must outlast the window). It answers
// before it asks, so of two nodes of two regions that start on one id at
// the same moment at least one hears the other, once the gateway has
// carried its interest (by the second question, half a window on). Once
// the check passed, a
// goroutine checks again every cfg.Period, counting only nodes that passed
// their own start check, until Close.
func Start(ctx context.Context, cfg Config) (*Guard, error) {
	if cfg.Conn == nil || cfg.Node == "" {
		return nil, errors.New("region: Conn and Node are required")
	}
	if cfg.Count < 0 {
		return nil, fmt.Errorf("region: region count %d is negative", cfg.Count)
	}
	if cfg.Count > 0 {
		if err := wire.CheckRegion(cfg.Region); err != nil {
			return nil, fmt.Errorf("region: %w", err)
		}
		if cfg.ID < 0 {
			return nil, fmt.Errorf("region: region id %d is negative", cfg.ID)
		}
	} else {
		cfg.Region, cfg.ID = "", 0
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	g := &Guard{cfg: cfg}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	nc := cfg.Conn
	answer := func(m *nats.Msg) {
		b, _ := json.Marshal(wire.NodeRegion{Node: cfg.Node, Instance: cfg.Instance, Region: cfg.Region, ID: cfg.ID,
			Cluster: nc.ConnectedClusterName(), Checked: g.checked.Load(), Regions: cfg.Count})
		if err := m.Respond(b); err != nil {
			cfg.Log.Warn("region: answering "+m.Subject, "err", err)
		}
	}
	subjects := []string{wire.RegionsSubject}
	if cfg.Count > 0 {
		subjects = append(subjects, wire.RegionSubject(cfg.ID))
	}
	for _, subject := range subjects {
		sub, err := nc.Subscribe(subject, answer)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("region: answer %s: %w", subject, err)
		}
		g.subs = append(g.subs, sub)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		g.Close()
		return nil, fmt.Errorf("region: answer %v: %w", subjects, err)
	}
	// A node with regions starts only once its check passed. One without
	// (the default: a lone zero-setup node serves within 100 ms) answers at
	// once and checks in the background: beside nodes with regions it is
	// found, and stops (Conflict), within the window; a node with regions
	// started beside it is refused by its own check.
	if cfg.Count > 0 {
		if err := check(ctx, nc, cfg.Region, cfg.ID, cfg.Count, cfg.Window, false); err != nil {
			g.Close()
			return nil, err
		}
		g.checked.Store(true)
	}
	g.wg.Add(1)
	go g.run(cfg.Count == 0)
	return g, nil
}

// Err is the conflict a running check found (wrapping ErrIDTaken or
// ErrRegionsDiffer), nil
// while none was. Once set it stays.
func (g *Guard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conflict
}

// Close stops the checks and the answers; idempotent.
func (g *Guard) Close() {
	if g == nil {
		return
	}
	g.closed.Do(func() {
		g.cancel()
		g.wg.Wait()
		for _, sub := range g.subs {
			_ = sub.Unsubscribe()
		}
	})
}

// run checks every Period until a conflict or Close, the first at once
// when first (a node without regions, whose start did not wait for it). A
// check that could not ask (NATS away) is tried at the next period.
func (g *Guard) run(first bool) {
	defer g.wg.Done()
	t := g.cfg.Clock.NewTicker(g.cfg.Period)
	defer t.Stop()
	ctx := g.ctx
	for {
		checkedOnly := !first // a start's check counts the starting nodes too
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
		}
		first = false
		err := check(ctx, g.cfg.Conn, g.cfg.Region, g.cfg.ID, g.cfg.Count, g.cfg.Window, checkedOnly)
		if err == nil && !checkedOnly {
			g.checked.Store(true)
		}
		switch {
		case errors.Is(err, ErrIDTaken), errors.Is(err, ErrRegionsDiffer):
			g.mu.Lock()
			g.conflict = err
			g.mu.Unlock()
			g.cfg.Log.Error("region: another node's region id or count conflicts with this node's: stop serving what depends on them", "err", err)
			if g.cfg.Conflict != nil {
				g.cfg.Conflict(err)
			}
			return
		case err != nil && ctx.Err() == nil:
			g.cfg.Log.Warn("region: could not check the region id and count", "id", g.cfg.ID, "regions", g.cfg.Count, "err", err)
		}
	}
}

// check asks wire.RegionsSubject, and with regions (count > 0)
// wire.RegionSubject(id), twice, at once and half way through its window.
// It returns ErrIDTaken at the first answer on the id of a region other
// than name, ErrRegionsDiffer at the first answer on RegionsSubject with a
// count other than count (of a node that passed its start check only, when
// checkedOnly). A "no responders" status ends no wait: the interest of
// another cluster may not have reached this server yet. The answers come
// to one inbox per subject, so only those on RegionsSubject are read for
// the count (a node of an older version answers the id without one).
func check(ctx context.Context, nc *nats.Conn, name string, id, count int, window time.Duration, checkedOnly bool) error {
	w := windowOf(nc, window)
	inbox := nc.NewInbox()
	onID, onCount := inbox+".id", inbox+".regions"
	sub, err := nc.SubscribeSync(inbox + ".*")
	if err != nil {
		return fmt.Errorf("region: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := wire.RegionSubject(id)
	ask := func() error {
		if err := nc.PublishRequest(wire.RegionsSubject, onCount, nil); err != nil {
			return fmt.Errorf("region: ask %s: %w", wire.RegionsSubject, err)
		}
		if count > 0 {
			if err := nc.PublishRequest(subject, onID, nil); err != nil {
				return fmt.Errorf("region: ask %s: %w", subject, err)
			}
		}
		return nil
	}
	if err := ask(); err != nil {
		return err
	}
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
			return fmt.Errorf("region: ask %s: %w", subject, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			if again.IsZero() {
				return nil // the window is over: no other region answered
			}
			again = time.Time{}
			if err := ask(); err != nil {
				return err
			}
			continue
		case errors.Is(err, nats.ErrNoResponders):
			continue
		case err != nil:
			return fmt.Errorf("region: ask %s: %w", subject, err)
		}
		var a wire.NodeRegion
		if json.Unmarshal(msg.Data, &a) != nil || a.Node == "" || (checkedOnly && !a.Checked) {
			continue
		}
		where := ""
		if a.Cluster != "" {
			where = " on NATS cluster " + a.Cluster
		}
		switch {
		case msg.Subject == onCount && a.Regions != count:
			return fmt.Errorf("%w: node %s%s runs with %s, and this node with %s: every node of every region must be given the same --regions",
				ErrRegionsDiffer, a.Node, where, regionsFlag(a.Regions), regionsFlag(count))
		case msg.Subject == onID && a.Region != "" && a.Region != name:
			return fmt.Errorf("%w: region %q uses region id %d too (node %s%s), and this node's region is %q: give each region an id of its own",
				ErrIDTaken, a.Region, id, a.Node, where, name)
		}
	}
}

// regionsFlag names a region count as its flag: "--regions N", or
// "no --regions" for 0.
func regionsFlag(n int) string {
	if n == 0 {
		return "no --regions"
	}
	return fmt.Sprintf("--regions %d", n)
}

// windowOf is w (DefaultWindow when 0) plus twice nc's round trip to its
// server, at most maxWindow: a node far from NATS hears a near region's
// answer only after its own link's round trip.
func windowOf(nc *nats.Conn, w time.Duration) time.Duration {
	if w <= 0 {
		w = DefaultWindow
	}
	if rtt, err := nc.RTT(); err == nil {
		w += 2 * rtt
	}
	return min(w, maxWindow)
}
