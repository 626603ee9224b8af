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
	// DefaultWindow is how long a question of a tag's home (Homes) waits
	// for the other regions' answers beyond twice this node's round trip
	// to its server: as long as a start check (StartWindow), so that a
	// monotonic create across a gateway slow enough to pass a start is
	// not refused as unanswered, and two creates at one moment hear each
	// other's "creating" as two starts hear each other. A create is an
	// operator's command: the second and a half is not on a request's
	// path.
	DefaultWindow = StartWindow
	// StartWindow is how long a start check (Start, Check) waits for
	// another region's answer beyond twice this node's round trip to its
	// server: a region across a gateway of up to about 1.5 s round trip
	// is refused at start, and two regions that start at once on one id
	// hear each other over a gateway of up to about 375 ms each way (the
	// second question, half a window on, must cross after the other's
	// interest has, and its answer come back). A later answer still
	// counts, when it comes (Start).
	StartWindow = 1500 * time.Millisecond
	// DefaultPeriod is how often a running node checks its region id
	// again.
	DefaultPeriod = 10 * time.Second
	// Skew is how much earlier a region must have started serving
	// (wire.NodeRegion.Since, each node's own clock) for its running node
	// to keep serving beside a conflict it finds: more than the clocks of
	// two regions' hosts may differ.
	Skew = 2 * time.Second
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
// (ErrIDTaken) as soon as one of another region answers: of another name
// than name, or of this name on another NATS cluster than the one nc is
// connected to (each compared only when both are known); in the same
// window it asks every node (wire.RegionsSubject) and refuses
// (ErrRegionsDiffer) as soon as one answers with a region count other
// than count. With count 0 (no regions) name and id are not used and only
// the count is checked. It waits window (StartWindow when 0) plus twice
// nc's round trip, at most 5 s, for such an answer; the answers of nodes
// that are still starting count too. An error other than these two means
// it could not ask.
func Check(ctx context.Context, nc *nats.Conn, name string, id, count int, window time.Duration) error {
	if count == 0 {
		name, id = "", 0
	}
	q, err := newQuestion(nc, name, id, count, nc.ConnectedClusterName())
	if err != nil {
		return err
	}
	defer q.close()
	return q.window(ctx, window, nil)
}

// Config is what Start needs: the connection, the region, and who answers.
type Config struct {
	// Conn is the node's NATS connection. Required. The NATS cluster it
	// is connected to at Start is the node's home (wire.NodeRegion.Home).
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
	// Window is the start check's window (StartWindow when 0); see Check.
	Window time.Duration
	// Period is how often the running node asks again (DefaultPeriod
	// when 0).
	Period time.Duration
	// Conflict is called once, from the Guard's goroutine, with the
	// conflict for which the running node must stop (an error wrapping
	// ErrIDTaken or ErrRegionsDiffer): the node stops serving what
	// depends on the region id and count. It must not call Close. May be
	// nil.
	Conflict func(error)
	// Clock times the period and dates Since; the real clock when nil.
	Clock clock.Clock
	// Log gets the warnings and the conflict; slog.Default when nil.
	Log *slog.Logger
}

// Guard answers for this node's region id and checks it while the node
// runs.
type Guard struct {
	cfg     Config
	q       *question // the node's questions, answered on one inbox for the Guard's life
	subs    []*nats.Subscription
	checked atomic.Bool  // the start check passed: answers say Checked
	stopped atomic.Bool  // a conflict stopped the node: answers say Stopped
	since   atomic.Int64 // wire.NodeRegion.Since, Unix ns; set before checked

	mu       sync.Mutex
	conflict error // the conflict a running check found; final

	younger map[string]time.Time // the run goroutine's: conflicting younger nodes, when first heard

	// watch is checked every period with the running check (Watch).
	watch atomic.Pointer[func(context.Context) error]

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
// carried its interest (by the second question, half a window on).
//
// Once the check passed, a goroutine asks again every cfg.Period until
// Close. The answers come to one inbox for the Guard's life, and each
// counts whenever it comes, however slow the gateway it crossed: an
// answer to the start check's question that comes after its window is
// judged as a running check's. A running node counts only the nodes that
// passed their own start check, and of a conflict (Config.Conflict) it
// stops unless its region started serving more than Skew before the
// other's (wire.NodeRegion.Since): then the other stops, and if the other
// has not said it stopped (wire.NodeRegion.Stopped) 2 periods and 5 s
// after it was first heard (it may not hear this node) this node stops
// too. So of two regions on one id at most one keeps serving.
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
	nc := cfg.Conn
	q, err := newQuestion(nc, cfg.Region, cfg.ID, cfg.Count, nc.ConnectedClusterName())
	if err != nil {
		return nil, err
	}
	g := &Guard{cfg: cfg, q: q, younger: map[string]time.Time{}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	answer := func(m *nats.Msg) {
		a := wire.NodeRegion{Node: cfg.Node, Instance: cfg.Instance, Region: cfg.Region, ID: cfg.ID,
			Cluster: nc.ConnectedClusterName(), Home: q.home, Regions: cfg.Count}
		if g.checked.Load() {
			a.Checked, a.Since = true, time.Unix(0, g.since.Load()).UTC()
		}
		a.Stopped = g.stopped.Load()
		b, _ := json.Marshal(a)
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
		if err := g.startCheck(ctx); err != nil {
			g.Close()
			return nil, err
		}
	}
	g.wg.Add(1)
	go g.run(cfg.Count == 0)
	return g, nil
}

// startCheck is the start's check (Check's window, every answer
// counting); once it passed, the node is Checked, its region serving
// since the earliest Since of its region's nodes it heard, or from now.
func (g *Guard) startCheck(ctx context.Context) error {
	var since time.Time
	err := g.q.window(ctx, g.cfg.Window, func(a wire.NodeRegion, onID bool) {
		if g.mate(a, onID) && (since.IsZero() || a.Since.Before(since)) {
			since = a.Since
		}
	})
	if err != nil {
		return err
	}
	if now := g.cfg.Clock.Now(); since.IsZero() || since.After(now) {
		since = now
	}
	g.since.Store(since.UnixNano())
	g.checked.Store(true)
	return nil
}

// mate: a is a node of this node's region (with regions: its name and
// home cluster, on the id; without: another node without regions) that
// serves, whose Since this node's region shares: a node that joins a
// running region is as old as the region.
func (g *Guard) mate(a wire.NodeRegion, onID bool) bool {
	if !a.Checked || a.Since.IsZero() {
		return false
	}
	if g.cfg.Count == 0 {
		return !onID && a.Regions == 0
	}
	return onID && a.Region == g.cfg.Region && !homesDiffer(a.Home, g.q.home)
}

// Watch adds f to the running checks: every period f is called, and an
// error from it is a conflict (the node stops, as for another region on
// its id). f reports conflicts only, not failures to look: the region's
// store recording another region (segment.RegionMarkConflict), so that a
// record an operator deleted while the node ran is written again, or a
// second region that took the store meanwhile stops one of the two.
func (g *Guard) Watch(f func(context.Context) error) { g.watch.Store(&f) }

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
		g.unanswer()
		g.q.close()
	})
}

// unanswer ends this node's answers.
func (g *Guard) unanswer() {
	for _, sub := range g.subs {
		_ = sub.Unsubscribe()
	}
}

// run asks every Period, and judges each answer as it comes, until a
// conflict stops the node or Close. A node without regions (first: its
// start did not wait for its check) runs its start check first. A
// question that could not be sent (NATS away) is sent at the next period.
func (g *Guard) run(first bool) {
	defer g.wg.Done()
	ctx := g.ctx
	if first {
		err := g.startCheck(ctx)
		switch {
		case errors.Is(err, ErrIDTaken), errors.Is(err, ErrRegionsDiffer):
			g.stop(err)
			return
		case err != nil && ctx.Err() == nil:
			g.cfg.Log.Warn("region: could not check the region count", "regions", g.cfg.Count, "err", err)
		}
	}
	t := g.cfg.Clock.NewTicker(g.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := g.q.ask(); err != nil {
				g.cfg.Log.Warn("region: could not check the region id and count", "id", g.cfg.ID, "regions", g.cfg.Count, "err", err)
			}
			if w := g.watch.Load(); w != nil {
				wctx, cancel := context.WithTimeout(ctx, maxWindow)
				err := (*w)(wctx)
				cancel()
				if err != nil {
					g.stop(err)
					return
				}
			}
		case m := <-g.q.ch:
			if err := g.judge(m); err != nil {
				g.stop(err)
				return
			}
		}
	}
}

// judge is a running node's verdict on an answer: the error for which it
// must stop, or nil. Only nodes that passed their own start check count.
// Of a conflict this node stops unless its region started serving more
// than Skew before the other's; then it waits for the other to stop, and
// stops too if the other has not said it stopped 2 periods and 5 s (the
// longest window) after it was first heard: the other may not hear this
// node, and two must never both keep serving.
func (g *Guard) judge(m *nats.Msg) error {
	a, onID, ok := g.q.read(m)
	if !ok || !a.Checked {
		return nil
	}
	if g.mate(a, onID) && a.Since.UnixNano() < g.since.Load() {
		g.since.Store(a.Since.UnixNano())
	}
	err := g.q.conflict(a, onID)
	if err == nil {
		return nil
	}
	since := time.Unix(0, g.since.Load())
	if a.Since.IsZero() || !since.Add(Skew).Before(a.Since) {
		// Neither is clearly older (or the other's age is unknown): both
		// stop. A node that stopped already still counts here, so that
		// the other stops as well.
		return fmt.Errorf("%w (this node's region is not more than %v older than the other's, serving since %s, the other since %s: this node stops)",
			err, Skew, since.UTC().Format(time.RFC3339Nano), sinceOf(a))
	}
	key := a.Node + "\x00" + a.Instance
	if a.Stopped {
		delete(g.younger, key) // a younger node that stopped, as it must
		return nil
	}
	now := g.cfg.Clock.Now()
	first, seen := g.younger[key]
	if !seen {
		g.younger[key] = now
		g.cfg.Log.Warn("region: a younger node conflicts with this node; it must stop, this node's region was first and keeps serving",
			"err", err, "since", since.UTC(), "other_since", a.Since)
		return nil
	}
	if grace := 2*g.cfg.Period + maxWindow; now.Sub(first) > grace {
		return fmt.Errorf("%w (the other region is younger, but its node has not stopped %v after it was first heard, so this node stops too)",
			err, grace)
	}
	return nil
}

// sinceOf is a's Since as an error says it.
func sinceOf(a wire.NodeRegion) string {
	if a.Since.IsZero() {
		return "an unknown time"
	}
	return a.Since.UTC().Format(time.RFC3339Nano)
}

// stop records err as the node's conflict, says so in its answers (an
// older region that waits for it to stop sees it stopped) and reports it.
func (g *Guard) stop(err error) {
	g.mu.Lock()
	g.conflict = err
	g.mu.Unlock()
	g.stopped.Store(true)
	g.q.close()
	g.cfg.Log.Error("region: another node's region id or count conflicts with this node's: stop serving what depends on them", "err", err)
	if g.cfg.Conflict != nil {
		g.cfg.Conflict(err)
	}
}

// question asks wire.RegionsSubject, and with regions (count > 0)
// wire.RegionSubject(id), and receives the answers on one inbox, those on
// RegionsSubject and those on the id apart (a node of an older version
// answers the id without a count): inbox.regions and inbox.id.
type question struct {
	nc            *nats.Conn
	name          string
	id, count     int
	home          string // the NATS cluster of the asking node's region
	onID, onCount string
	ch            chan *nats.Msg
	sub           *nats.Subscription
}

// newQuestion subscribes the inbox of a node of region name, id, count,
// home.
func newQuestion(nc *nats.Conn, name string, id, count int, home string) (*question, error) {
	inbox := nc.NewInbox()
	q := &question{nc: nc, name: name, id: id, count: count, home: home,
		onID: inbox + ".id", onCount: inbox + ".regions", ch: make(chan *nats.Msg, 1024)}
	sub, err := nc.ChanSubscribe(inbox+".*", q.ch)
	if err != nil {
		return nil, fmt.Errorf("region: subscribe: %w", err)
	}
	q.sub = sub
	return q, nil
}

// close ends the inbox's subscription.
func (q *question) close() { _ = q.sub.Unsubscribe() }

// ask sends the questions once.
func (q *question) ask() error {
	if err := q.nc.PublishRequest(wire.RegionsSubject, q.onCount, nil); err != nil {
		return fmt.Errorf("region: ask %s: %w", wire.RegionsSubject, err)
	}
	if q.count > 0 {
		subject := wire.RegionSubject(q.id)
		if err := q.nc.PublishRequest(subject, q.onID, nil); err != nil {
			return fmt.Errorf("region: ask %s: %w", subject, err)
		}
	}
	return nil
}

// read is an answer's NodeRegion, and whether it answers the id (else
// the count); not ok for what is no answer (a "no responders" status).
func (q *question) read(m *nats.Msg) (a wire.NodeRegion, onID, ok bool) {
	if m.Subject != q.onID && m.Subject != q.onCount {
		return a, false, false
	}
	if json.Unmarshal(m.Data, &a) != nil || a.Node == "" {
		return a, false, false
	}
	return a, m.Subject == q.onID, true
}

// conflict is what a's answer conflicts with: its count (on
// RegionsSubject), or, on the id, its region: another name, or this name
// on another NATS cluster (a region is one NATS cluster); nil when none.
// Two nodes are on two clusters when both their homes and the clusters
// they are connected to now differ: a node's failover to another cluster
// leaves its home, and a NATS cluster without a configured name, whose
// random name changes when a server restarts (nodes started before and
// after have two homes), gives every client its new name.
func (q *question) conflict(a wire.NodeRegion, onID bool) error {
	where := ""
	if a.Cluster != "" {
		where = " on NATS cluster " + a.Cluster
	}
	switch {
	case !onID && a.Regions != q.count:
		return fmt.Errorf("%w: node %s%s runs with %s, and this node with %s: every node of every region must be given the same --regions",
			ErrRegionsDiffer, a.Node, where, regionsFlag(a.Regions), regionsFlag(q.count))
	case onID && a.Region != "" && a.Region != q.name:
		return fmt.Errorf("%w: region %q uses region id %d too (node %s%s), and this node's region is %q: give each region an id of its own",
			ErrIDTaken, a.Region, q.id, a.Node, where, q.name)
	case onID && a.Region == q.name && homesDiffer(a.Home, q.home) && homesDiffer(a.Cluster, q.nc.ConnectedClusterName()):
		return fmt.Errorf("%w: region %q uses region id %d on NATS cluster %s too (node %s%s), and this node's is on NATS cluster %s: a region is one NATS cluster, give each its own name and id",
			ErrIDTaken, a.Region, q.id, a.Home, a.Node, where, q.home)
	}
	return nil
}

// homesDiffer: two nodes' clusters are known and differ.
func homesDiffer(a, b string) bool { return a != "" && b != "" && a != b }

// window asks twice, at once and half way through its window (w,
// StartWindow when 0, plus twice nc's round trip, at most maxWindow), and
// returns the first conflict an answer brings, of any node, still
// starting or not; heard is given every answer before. A "no responders"
// status ends no wait: the interest of another cluster may not have
// reached this server yet. Answers that come later stay in q.ch.
func (q *question) window(ctx context.Context, w time.Duration, heard func(a wire.NodeRegion, onID bool)) error {
	w = windowOf(q.nc, w, StartWindow)
	if err := q.ask(); err != nil {
		return err
	}
	again := time.NewTimer(w / 2)
	defer again.Stop()
	end := time.NewTimer(w)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("region: check region id %d: %w", q.id, ctx.Err())
		case <-again.C:
			if err := q.ask(); err != nil {
				return err
			}
		case <-end.C:
			return nil // the window is over: no other region answered
		case m := <-q.ch:
			a, onID, ok := q.read(m)
			if !ok {
				continue
			}
			if heard != nil {
				heard(a, onID)
			}
			if err := q.conflict(a, onID); err != nil {
				return err
			}
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

// windowOf is w (def when 0) plus twice nc's round trip to its server, at
// most maxWindow: a node far from NATS hears a near region's answer only
// after its own link's round trip.
func windowOf(nc *nats.Conn, w, def time.Duration) time.Duration {
	if w <= 0 {
		w = def
	}
	if rtt, err := nc.RTT(); err == nil {
		w += 2 * rtt
	}
	return min(w, maxWindow)
}
