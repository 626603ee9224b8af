package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// Schedule shape.
const (
	maxWarmup      = 10 * time.Second       // load before the first fault
	maxCooldown    = 15 * time.Second       // load after the last fault starts... at least
	faultSpacing   = 40 * time.Second       // in long runs: about one fault this often
	natsDownFor    = 9 * time.Second        // a killed nats-server stays down this long: a restart, not a blip
	clockStepAfter = 5 * time.Second        // the clock drills step this long after the start
	clockOffset    = 800 * time.Millisecond // clock-slow and clock-fast: off by this (under the peer check's 1s)
)

// Run starts the cluster, puts load on it while faults are injected, stops
// everything it started and returns the report. An error means the run
// could not happen (a component did not start); a run that happened but
// found duplicates or crashes returns a report with Pass false. Ctrl-C
// (ctx) ends the load early; everything is still stopped and checked.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	dir, done, err := workDir(&cfg, "leafchaos-")
	if err != nil {
		return nil, err
	}
	defer done()
	c := &cluster{cfg: &cfg, log: log, dir: dir, net: newNetFaults()}
	defer c.close()

	log.Info("chaos: building binaries", "dir", dir)
	if err := c.build(ctx); err != nil {
		return nil, err
	}
	log.Info("chaos: starting MariaDB, ZooKeeper and a 3-node NATS cluster")
	var wg sync.WaitGroup
	var dbErr, zkErr error
	wg.Add(2)
	go func() { defer wg.Done(); dbErr = c.startDB(ctx) }()
	go func() { defer wg.Done(); zkErr = c.startZK(ctx) }()
	natsErr := c.startNATS(ctx)
	wg.Wait()
	for _, err := range []error{dbErr, zkErr, natsErr} {
		if err != nil {
			return nil, err
		}
	}
	if err := c.addLeafds(); err != nil {
		return nil, err
	}
	for i := range c.leafds {
		took, err := c.startLeafd(ctx, i)
		if err != nil {
			return nil, err
		}
		log.Info("chaos: leafd ready", "node", c.leafds[i].name, "took", took.Round(time.Millisecond))
	}

	l := &load{cfg: &cfg}
	defer l.close()
	if err := l.connect(c.directURLs()); err != nil {
		return nil, err
	}
	if cfg.PoolRate > 0 {
		subjects := []string{pool.SegmentSubject(cfg.Tags[0]), pool.SnowflakeSubject}
		if err := waitPools(ctx, l, subjects, 30*time.Second); err != nil {
			log.Warn("chaos: pools not there before the load", "err", err)
		}
	}
	t0 := time.Now()
	l.t0 = t0
	mainFaults, opFaults := splitFaults(cfg.Faults)
	span := cfg.Duration + time.Minute + estimate(&cfg, mainFaults)
	l.tl = newTimeline(t0.UnixNano(), span, max(100*time.Millisecond, span/20000))
	l.av = newAvailTL(t0.UnixNano(), span)
	spaces := addKinds(l, &cfg, t0)
	log.Info("chaos: load and faults", "duration", cfg.Duration, "rate", cfg.Rate, "pool_rate", cfg.PoolRate, "seed", cfg.Seed)
	// The load runs for Duration, longer if the schedule has not injected
	// each fault once by then (then until a cool-down after the last).
	soft, stopSoft := context.WithTimeout(ctx, cfg.Duration)
	defer stopSoft()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go l.av.watchStalls(loadCtx)
	f := &faulter{c: c, l: l, cfg: &cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 1)), t0: t0,
		faults: mainFaults, spaces: spaces, cycled: make(chan struct{})}
	ot := &opTrack{c: c, cfg: &cfg, faults: opFaults, t0: t0, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 2))}
	var fwg sync.WaitGroup
	fwg.Add(4)
	go func() { defer fwg.Done(); l.run(loadCtx) }()
	go func() { defer fwg.Done(); f.run(soft, ctx) }()
	go func() { defer fwg.Done(); ot.run(soft, ctx) }()
	go func() {
		defer fwg.Done()
		defer stopLoad()
		<-soft.Done()
		select {
		case <-f.cycled:
		case <-ctx.Done():
			return
		}
		if f.late.Load() {
			select {
			case <-time.After(min(maxCooldown, cfg.Duration/8)):
			case <-ctx.Done():
			}
		}
	}()
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); progress(loadCtx, &cfg, l, f, t0) }()
	pr := newProber(c, l, &cfg, spaces)
	proberDone := make(chan struct{})
	go func() { defer close(proberDone); pr.run(loadCtx) }()
	fwg.Wait()
	<-progressDone
	<-proberDone
	end := l.stopAt.Load()
	if end == 0 {
		end = time.Now().UnixNano()
	}
	f.mu.Lock()
	f.results = append(f.results, ot.results...)
	f.mu.Unlock()
	return buildReport(ctx, &cfg, c, l, f, pr, spaces, ot, t0, time.Unix(0, end)), nil
}

// addKinds sets up what the clients ask for: per tag singles and batches,
// snowflake singles and batches, and the two pools.
func addKinds(l *load, cfg *Config, t0 time.Time) map[string]*idSpace {
	start := t0.UnixNano()
	window := int64(max(cfg.Duration/30, time.Second))
	spaces := map[string]*idSpace{}
	subj := map[string]*kindStats{}
	space := func(name string) *idSpace {
		if spaces[name] == nil {
			spaces[name] = newIDSpace(start, window)
		}
		return spaces[name]
	}
	add := func(name, subject string, eng int, sp string, batch, isPool bool, weight int) {
		if subj[subject] == nil {
			subj[subject] = newKindStats(start)
		}
		k := &kind{name: name, subject: subject, batch: batch, pool: isPool, engine: eng, space: space(sp),
			weight: weight, stats: newKindStats(start), subj: subj[subject], client: strings.HasPrefix(subject, clientPrefix)}
		k.class = classOf(k)
		if isPool {
			l.pools = append(l.pools, k)
			return
		}
		l.kinds = append(l.kinds, k)
		l.total += weight
	}
	// Weights (of 11000): raw requests segment singles 4500, batches 1500;
	// snowflake singles 3000, batches 1000; through the client 1000.
	nt := len(cfg.Tags)
	for _, tag := range cfg.Tags {
		s := wire.SegmentPrefix + tag
		add(s+" single", s, engSegment, "segment."+tag, false, false, 4500/nt)
		add(s+" batch", s, engSegment, "segment."+tag, true, false, 1500/nt)
	}
	add(wire.SnowflakeSubject+" single", wire.SnowflakeSubject, engSnowflake, "snowflake", false, false, 3000)
	add(wire.SnowflakeSubject+" batch", wire.SnowflakeSubject, engSnowflake, "snowflake", true, false, 1000)
	// The same through the Go client without its cache (so every call is
	// a request): what an application sees, with retries and failover.
	cs := clientPrefix + wire.SegmentPrefix + cfg.Tags[0]
	add(cs+" single", cs, engSegment, "segment."+cfg.Tags[0], false, false, 400)
	add(cs+" batch", cs, engSegment, "segment."+cfg.Tags[0], true, false, 100)
	// The monotonic tag, through the client (it asks again through a
	// leader's switch-over); every success goes into a history that the
	// report checks for strict order.
	ms := clientPrefix + wire.MonoPrefix + MonoTag
	add(ms+" single", ms, engMono, "mono."+MonoTag, false, false, 300)
	cs = clientPrefix + wire.SnowflakeSubject
	add(cs+" single", cs, engSnowflake, "snowflake", false, false, 400)
	add(cs+" batch", cs, engSnowflake, "snowflake", true, false, 100)
	if cfg.PoolRate > 0 {
		ps := pool.SegmentSubject(cfg.Tags[0])
		add(ps+" take", ps, engPool, "segment."+cfg.Tags[0], false, true, 0)
		add(pool.SnowflakeSubject+" take", pool.SnowflakeSubject, engPool, "snowflake", false, true, 0)
	}
	return spaces
}

// classOf is the availability class of a kind of request.
func classOf(k *kind) int {
	switch {
	case k.pool:
		return clsPool
	case k.engine == engMono:
		return clsMono
	case k.client && k.engine == engSnowflake:
		return clsClientSnowflake
	case k.client:
		return clsClientSegment
	case k.engine == engSnowflake:
		return clsSnowflake
	}
	return clsSegment
}

// waitPools waits until each pool stream and consumer exists, so the first
// takes do not all count as empty.
func waitPools(ctx context.Context, l *load, subjects []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, subject := range subjects {
		for {
			_, err := l.jss[0].Consumer(ctx, pool.Stream, consumerName(subject))
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %w", subject, err)
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return nil
}

// consumerName is package pool's name for a subject's consumer
// (leaf.pool.segment.a -> pool_segment_a); only used to wait for it.
func consumerName(subject string) string {
	return "pool_" + strings.ReplaceAll(strings.TrimPrefix(subject, pool.Prefix), ".", "_")
}

// progress writes a line every ProgressEvery until ctx ends.
func progress(ctx context.Context, cfg *Config, l *load, f *faulter, t0 time.Time) {
	if cfg.Progress == nil {
		return
	}
	tick := time.NewTicker(cfg.ProgressEvery)
	defer tick.Stop()
	var lastSent, lastOK int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var sent, ok, ids int64
		for _, k := range append(append([]*kind(nil), l.kinds...), l.pools...) {
			sent += k.stats.sent.Load()
			ok += k.stats.ok.Load()
			ids += k.stats.ids.Load()
		}
		fmt.Fprintf(cfg.Progress, "%6.0fs  req %8d (+%5d)  ok %8d (+%5d)  failed %6d  ids %10d  in flight %3d  dropped %d  fault: %s\n",
			time.Since(t0).Seconds(), sent, sent-lastSent, ok, ok-lastOK, sent-ok-l.inflight.Load(), ids,
			l.inflight.Load(), l.dropped.Load(), f.current())
		lastSent, lastOK = sent, ok
	}
}

// faulter injects the faults of the schedule, one at a time.
type faulter struct {
	c   *cluster
	l   *load
	cfg *Config
	rng *rand.Rand
	t0  time.Time

	faults []string            // the main track's schedule
	spaces map[string]*idSpace // where ids taken by the harness itself go
	cycled chan struct{}       // closed once each fault was injected (or the run ends)
	late   atomic.Bool         // the first cycle ran past Duration's cool-down

	mu      sync.Mutex
	now     []string       // the fault under way in each lane, "" none
	counts  map[string]int // injections so far, by kind
	results []*FaultResult
}

// intN is f.rng.IntN for the lanes, which draw at the same time.
func (f *faulter) intN(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

// pickLeafd picks a main leafd at random among cand (nil: all) that no
// other lane's fault holds, waiting for one if all are held, and holds it:
// the caller unlocks its busy.
func (f *faulter) pickLeafd(ctx context.Context, cand []int) int {
	if cand == nil {
		for i := range f.c.leafds {
			cand = append(cand, i)
		}
	}
	for {
		start := f.intN(len(cand))
		for k := range cand {
			i := cand[(start+k)%len(cand)]
			if f.c.leafds[i].busy.TryLock() {
				return i
			}
		}
		if ctx.Err() != nil {
			i := cand[start]
			f.c.leafds[i].busy.Lock()
			return i
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// count is how many faults of kind were injected so far.
func (f *faulter) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[kind]
}

func (f *faulter) current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var now []string
	for _, k := range f.now {
		if k != "" {
			now = append(now, k)
		}
	}
	if len(now) == 0 {
		return "-"
	}
	return strings.Join(now, "+")
}

// lanes splits the main track's schedule: one lane, or with
// Config.Overlap two that strike at the same time — lane 0 the faults that
// freeze or restart a main leafd on a changed clock, lane 1 the rest
// (NATS, MariaDB, ZooKeeper, the network, more hosts, a leafd killed), so
// that the lanes take about as long. No two faults act on one leafd at
// once (pickLeafd); NATS, MariaDB and ZooKeeper are struck by lane 1
// only.
func lanes(faults []string, overlap bool) [][]string {
	if !overlap {
		return [][]string{faults}
	}
	out := make([][]string, 2)
	for _, k := range faults {
		lane := 1
		switch {
		case k == FaultFreezeLeafdKV, k == FaultFreezeLeafdZK, strings.HasPrefix(k, "clock-"):
			lane = 0
		}
		out[lane] = append(out[lane], k)
	}
	return out
}

// run injects the main track's faults, lane by lane at the same time
// (lanes), and closes f.cycled once every lane injected each of its faults
// (or the run ends).
func (f *faulter) run(soft, ctx context.Context) {
	defer func() {
		select {
		case <-f.cycled:
		default:
			close(f.cycled)
		}
	}()
	f.counts = map[string]int{}
	ls := lanes(f.faults, f.cfg.Overlap)
	f.now = make([]string, len(ls))
	var wg sync.WaitGroup
	cycled := make([]chan struct{}, len(ls))
	for i, faults := range ls {
		cycled[i] = make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); f.lane(soft, ctx, i, faults, cycled[i]) }()
	}
	for _, ch := range cycled {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	select {
	case <-f.cycled:
	default:
		close(f.cycled)
	}
	wg.Wait()
}

// lane injects faults from warm-up until the cool-down before soft ends,
// and past it until each was injected once (closing cycled then). A fault
// under way is finished under ctx.
func (f *faulter) lane(soft, ctx context.Context, lane int, faults []string, cycled chan struct{}) {
	defer func() {
		select {
		case <-cycled:
		default:
			close(cycled)
		}
	}()
	if len(faults) == 0 {
		return
	}
	d := f.cfg.Duration
	warm := min(maxWarmup, d/10)
	cool := min(maxCooldown, d/8)
	plan := schedule(d, warm, cool, len(faults))
	last := f.t0.Add(d - cool)
	var prevDone time.Time
	for i := 0; ; i++ {
		if i == len(faults) {
			close(cycled)
		}
		at := f.t0.Add(warm)
		if i < len(plan) {
			at = f.t0.Add(plan[i])
		}
		// A fault that ran late (a 60 s DB pause) must not have the next one
		// strike at once: the requests sent at its end would fail for the
		// next fault and count for this one.
		if settle := prevDone.Add(f.cfg.Timeout + time.Second); at.Before(settle) {
			at = settle
		}
		// Judged runs give each fault its recovery time and goalSustain
		// more of calm before the next one strikes.
		if f.cfg.Goals && i > 0 {
			if settle := prevDone.Add(recoveryGoal(faults[(i-1)%len(faults)]) + goalSustain + f.cfg.Timeout); at.Before(settle) {
				at = settle
			}
		}
		if i >= len(plan) && i >= len(faults) {
			return
		}
		if i >= len(faults) { // the first cycle is done: only within Duration
			select {
			case <-soft.Done():
				return
			case <-time.After(time.Until(at)):
			}
			if time.Now().After(last) {
				return
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(at)):
			}
			if time.Now().After(last) {
				f.late.Store(true)
			}
		}
		kind := faults[i%len(faults)]
		r := &FaultResult{Kind: kind, Track: trackMain, Lane: lane, at: time.Now()}
		r.InFlight = f.l.inflight.Load()
		f.l.strikes.Add(1)
		f.mu.Lock()
		f.now[lane] = kind
		f.results = append(f.results, r)
		f.mu.Unlock()
		f.cfg.Logger.Info("chaos: fault", "kind", kind, "lane", lane, "at", time.Since(f.t0).Round(time.Millisecond))
		if err := f.inject(ctx, kind, r); err != nil {
			r.Error = err.Error()
			f.c.problem("fault %s: %v", kind, err)
		}
		r.done = time.Now()
		prevDone = r.done
		f.mu.Lock()
		f.counts[kind]++
		f.now[lane] = ""
		f.mu.Unlock()
	}
}

// schedule spreads n faults (at least) evenly over a run of duration d
// from warm to d-cool: about one every faultSpacing in long runs, each
// fault of the schedule at least once. It returns when each is due, from
// the start of the load.
func schedule(d, warm, cool time.Duration, n int) []time.Duration {
	avail := max(d-warm-cool, time.Second)
	n = max(n, int(avail/faultSpacing))
	every := avail / time.Duration(n)
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = warm + time.Duration(i)*every
	}
	return out
}

// estimate is about how long one cycle of the main track takes, to size
// the timeline of a run that goes past Duration.
func estimate(cfg *Config, faults []string) time.Duration {
	var t time.Duration
	for _, f := range faults {
		t += cfg.Timeout + time.Second + 10*time.Second
		if cfg.Goals {
			t += recoveryGoal(f) + goalSustain
		}
		switch {
		case f == FaultKillNATS:
			t += natsDownFor
		case f == FaultPauseDB:
			t += cfg.DBPause
		case strings.HasPrefix(f, "freeze-"):
			t += cfg.Freeze + cfg.HostsFor
		case strings.HasPrefix(f, "hosts-"):
			t += cfg.HostsFor
		case strings.HasPrefix(f, "net-"):
			t += cfg.NetFor
		}
	}
	return t
}

func (f *faulter) inject(ctx context.Context, kind string, r *FaultResult) error {
	c := f.c
	switch kind {
	case FaultKillLeafd:
		i := f.pickLeafd(ctx, nil)
		defer c.leafds[i].busy.Unlock()
		r.Target = c.leafds[i].name
		c.leafds[i].kill9()
		return f.restartChecked(ctx, i, r, 0)
	case FaultPauseDB:
		r.Target = fmt.Sprintf("mariadbd pid %d for %v", c.dbPID, f.cfg.DBPause)
		if err := syscall.Kill(c.dbPID, syscall.SIGSTOP); err != nil {
			return err
		}
		r.pauseFrom = time.Now()
		sleep(ctx, f.cfg.DBPause)
		r.pauseTo = time.Now()
		return syscall.Kill(c.dbPID, syscall.SIGCONT)
	case FaultKillNATS:
		i := f.intN(len(c.nats))
		r.Target = c.nats[i].name
		c.nats[i].kill9()
		sleep(ctx, natsDownFor)
		t := time.Now()
		if err := c.nats[i].start(); err != nil {
			return err
		}
		err := waitTCP(ctx, c.natsAddr[i], readyWait)
		r.Recovery = time.Since(t).Seconds()
		return err
	case FaultRestartZK:
		r.Target = "zookeeper " + c.zkAddr
		took, err := c.restartZK(ctx)
		r.Recovery = took.Seconds()
		return err
	case FaultClockBack1, FaultClockBack10, FaultClockFwd1, FaultClockFwd10:
		by := time.Second
		if kind == FaultClockBack10 || kind == FaultClockFwd10 {
			by = 10 * time.Second
		}
		if kind == FaultClockBack1 || kind == FaultClockBack10 {
			by = -by
		}
		i := f.pickLeafd(ctx, nil)
		defer c.leafds[i].busy.Unlock()
		l := c.leafds[i]
		step := fmt.Sprintf("%v@%v", by, clockStepAfter)
		if by > 0 {
			step = "+" + step
		}
		r.Target = fmt.Sprintf("%s (%s), --fault-clock-step %s", l.name, l.registry, step)
		l.stop(10 * time.Second)
		if err := f.restartChecked(ctx, i, r, 0, "--fault-clock-step", step); err != nil {
			return err
		}
		// Hold until the step has happened and the node's clock has
		// caught up with the time it used, then put it back on the real
		// clock (so later restarts pass the peer clock check).
		hold := clockStepAfter - time.Duration(r.Recovery*float64(time.Second)) + by.Abs() + time.Second
		sleep(ctx, hold)
		l.stop(10 * time.Second)
		return f.restartChecked(ctx, i, r, 0)
	case FaultClockSlow, FaultClockFast:
		by := -clockOffset
		if kind == FaultClockFast {
			by = clockOffset
		}
		i := f.pickLeafd(ctx, nil)
		defer c.leafds[i].busy.Unlock()
		l := c.leafds[i]
		r.Target = fmt.Sprintf("%s (%s), --fault-clock-offset %v", l.name, l.registry, by)
		l.stop(10 * time.Second)
		// A node off its peers' clocks may refuse to start: a refusal.
		if err := f.restartChecked(ctx, i, r, 1, "--fault-clock-offset", by.String()); err != nil {
			r.Refusals++
			r.Notes = append(r.Notes, "refused to start: "+firstLine(err.Error()))
		} else {
			sleep(ctx, f.cfg.NetFor+by.Abs())
		}
		l.stop(10 * time.Second)
		return f.restartChecked(ctx, i, r, 0)
	}
	return f.injectMore(ctx, kind, r)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
