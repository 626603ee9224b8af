package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// Schedule shape.
const (
	maxWarmup      = 10 * time.Second // load before the first fault
	maxCooldown    = 15 * time.Second // load after the last fault starts... at least
	faultSpacing   = 40 * time.Second // in long runs: about one fault this often
	natsDownFor    = 3 * time.Second  // a killed nats-server stays down this long
	clockStepAfter = 5 * time.Second  // the clock drills step this long after the start
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
	dir := cfg.WorkDir
	if dir == "" {
		d, err := os.MkdirTemp("", "leafchaos-")
		if err != nil {
			return nil, err
		}
		dir = d
		if !cfg.Keep {
			defer os.RemoveAll(dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &cluster{cfg: &cfg, log: log, dir: dir}
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
	if err := l.connect(strings.Join(c.urls, ",")); err != nil {
		return nil, err
	}
	if cfg.PoolRate > 0 {
		subjects := []string{pool.SegmentSubject(cfg.Tags[0]), pool.SnowflakeSubject}
		if err := waitPools(ctx, l, subjects, 30*time.Second); err != nil {
			log.Warn("chaos: pools not there before the load", "err", err)
		}
	}
	t0 := time.Now()
	span := cfg.Duration + time.Minute
	l.tl = newTimeline(t0.UnixNano(), span, max(100*time.Millisecond, span/20000))
	spaces := addKinds(l, &cfg, t0)
	log.Info("chaos: load and faults", "duration", cfg.Duration, "rate", cfg.Rate, "pool_rate", cfg.PoolRate, "seed", cfg.Seed)
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	f := &faulter{c: c, l: l, cfg: &cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 1)), t0: t0}
	var fwg sync.WaitGroup
	fwg.Add(2)
	go func() { defer fwg.Done(); l.run(loadCtx) }()
	go func() { defer fwg.Done(); f.run(loadCtx, ctx) }()
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); progress(loadCtx, &cfg, l, f, t0) }()
	fwg.Wait()
	<-progressDone
	end := l.stopAt.Load()
	if end == 0 {
		end = time.Now().UnixNano()
	}
	return buildReport(ctx, &cfg, c, l, f, spaces, t0, time.Unix(0, end)), nil
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

	mu      sync.Mutex
	now     string
	results []*FaultResult
}

func (f *faulter) current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now == "" {
		return "-"
	}
	return f.now
}

// run injects faults from warm-up until the cool-down before the load ends
// (loadCtx). A fault under way when loadCtx ends is finished under ctx.
func (f *faulter) run(loadCtx, ctx context.Context) {
	d := f.cfg.Duration
	warm := min(maxWarmup, d/10)
	cool := min(maxCooldown, d/8)
	avail := d - warm - cool
	n := max(len(f.cfg.Faults), int(avail/faultSpacing))
	every := avail / time.Duration(n)
	last := f.t0.Add(d - cool)
	var prevDone time.Time
	for i := range n {
		at := f.t0.Add(warm + time.Duration(i)*every)
		// A fault that ran late (a 60 s DB pause) must not have the next one
		// strike at once: the requests sent at its end would fail for the
		// next fault and count for this one.
		if settle := prevDone.Add(f.cfg.Timeout + time.Second); at.Before(settle) {
			at = settle
		}
		select {
		case <-loadCtx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		if time.Now().After(last) {
			f.cfg.Logger.Warn("chaos: no time left for the rest of the schedule", "done", i, "of", n)
			return
		}
		kind := f.cfg.Faults[i%len(f.cfg.Faults)]
		r := &FaultResult{Kind: kind, at: time.Now()}
		r.InFlight = f.l.inflight.Load()
		f.mu.Lock()
		f.now = kind
		f.results = append(f.results, r)
		f.mu.Unlock()
		f.cfg.Logger.Info("chaos: fault", "kind", kind, "at", time.Since(f.t0).Round(time.Millisecond))
		if err := f.inject(ctx, kind, r); err != nil {
			r.Error = err.Error()
			f.c.problem("fault %s: %v", kind, err)
		}
		r.done = time.Now()
		prevDone = r.done
		f.mu.Lock()
		f.now = ""
		f.mu.Unlock()
	}
}

func (f *faulter) inject(ctx context.Context, kind string, r *FaultResult) error {
	c := f.c
	switch kind {
	case FaultKillLeafd:
		i := f.rng.IntN(len(c.leafds))
		r.Target = c.leafds[i].name
		c.leafds[i].kill9()
		took, err := c.startLeafd(ctx, i)
		r.Recovery = took.Seconds()
		return err
	case FaultPauseDB:
		r.Target = fmt.Sprintf("mariadbd pid %d for %v", c.dbPID, f.cfg.DBPause)
		if err := syscall.Kill(c.dbPID, syscall.SIGSTOP); err != nil {
			return err
		}
		r.pauseFrom = time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(f.cfg.DBPause):
		}
		r.pauseTo = time.Now()
		return syscall.Kill(c.dbPID, syscall.SIGCONT)
	case FaultKillNATS:
		i := f.rng.IntN(len(c.nats))
		r.Target = c.nats[i].name
		c.nats[i].kill9()
		select {
		case <-ctx.Done():
		case <-time.After(natsDownFor):
		}
		t := time.Now()
		if err := c.nats[i].start(); err != nil {
			return err
		}
		err := waitTCP(ctx, strings.TrimPrefix(c.urls[i], "nats://"), readyWait)
		r.Recovery = time.Since(t).Seconds()
		return err
	case FaultRestartZK:
		r.Target = "zookeeper " + c.zkAddr
		took, err := c.restartZK(ctx)
		r.Recovery = took.Seconds()
		return err
	case FaultClockBack1, FaultClockBack10:
		by := -time.Second
		if kind == FaultClockBack10 {
			by = -10 * time.Second
		}
		i := f.rng.IntN(len(c.leafds))
		l := c.leafds[i]
		r.Target = fmt.Sprintf("%s (%s), --fault-clock-step %v@%v", l.name, l.registry, by, clockStepAfter)
		l.stop(10 * time.Second)
		took, err := c.startLeafd(ctx, i, "--fault-clock-step", fmt.Sprintf("%v@%v", by, clockStepAfter))
		r.Recovery = took.Seconds()
		if err != nil {
			return err
		}
		// Hold until the step has happened and the node's clock has
		// caught up with the time it used, then put it back on the real
		// clock (so later restarts pass the peer clock check).
		hold := clockStepAfter - took + -by + 3*time.Second
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		l.stop(10 * time.Second)
		_, err = c.startLeafd(ctx, i)
		return err
	}
	return fmt.Errorf("unknown fault %q", kind)
}
