package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/segment"
)

// stepFileName is the file under DataDir where the segment engine remembers
// each tag's dynamic step across restarts (segment.StepFile).
const stepFileName = "segment-steps.json"

// startChecks is the phase of Start that runs independent checks
// together: the name check, the snowflake worker's registration (its own
// checks against the live nodes) and the segment store with the live
// nodes' floors each wait for every member's answer, and none needs
// another's result. Nothing is served before all have passed (the
// responder starts after this phase), and the tags load only once the name
// check passed, so a process refused for its name reserves no range.
// Stopping waits for every branch. It pushes the stops of what it starts
// itself, each before the start.
func (b *boot) startChecks(ctx context.Context) error {
	n, cfg := b.Node, b.cfg
	n.life.stops.push("snowflake", func(context.Context) error { return n.serve.sf.Close() })
	bctx, cancelBranches := context.WithCancel(ctx)
	defer cancelBranches()
	branch := func(phase string, step func(context.Context) error) <-chan error {
		done := make(chan error, 1)
		go func() { done <- n.await(bctx, phase, step) }()
		return done
	}
	nameDone := branch("checking the name against the live nodes", n.checkName)
	sfDone := branch("registering a snowflake worker", n.startSnowflake)
	var nameErr, sfErr error
	nameIn, sfIn := false, false // the branch's result is in
	waitName := func() error {
		if !nameIn {
			nameErr, nameIn = <-nameDone, true
		}
		return nameErr
	}
	waitAll := func() error {
		if !sfIn {
			sfErr, sfIn = <-sfDone, true
		}
		return errors.Join(waitName(), sfErr)
	}
	// snowflakeFailed is the snowflake branch's error if it ended with one.
	snowflakeFailed := func() error {
		if !sfIn {
			select {
			case sfErr = <-sfDone:
				sfIn = true
			default:
			}
		}
		return sfErr
	}
	// fail stops the branches still running after err and returns the
	// error to fail the start with: a refused name's, whatever else was
	// met meanwhile, else err.
	fail := func(err error) error {
		cancelBranches()
		_ = waitAll()
		if nameErr != nil && !errors.Is(nameErr, context.Canceled) {
			return nameErr
		}
		return err
	}
	n.life.stops.push("segment store", func(context.Context) error {
		if n.seg.store == nil {
			return nil
		}
		return n.seg.store.Close()
	})
	if err := n.await(bctx, "opening the segment store", func(ctx context.Context) error { return stores[n.storeKind()](n, ctx) }); err != nil {
		return fail(err)
	}
	// The steps are hints: a data directory that cannot be written costs
	// them, not the node.
	var steps segment.Steps
	sf, err := segment.OpenStepFileClock(filepath.Join(cfg.DataDir, stepFileName), n.log, n.clock)
	switch {
	case sf == nil:
		n.log.Warn("segment: running without remembered steps", "err", err)
	case err != nil:
		n.log.Warn("segment: remembered steps lost", "err", err)
	}
	if sf != nil {
		n.seg.steps, steps = sf, sf
		n.life.stops.push("segment steps", closer(sf))
	}
	err = n.await(bctx, "asking the live nodes for their floors", func(ctx context.Context) error {
		inc, err := n.incarnation(ctx)
		if err != nil {
			return err
		}
		return n.peers.HearFloors(ctx, peers.Floors{Store: inc, All: b.own, Modes: b.ownModes, MaxTags: cfg.Store.MaxTags})
	})
	if err != nil {
		return fail(err)
	}
	// The tags load once the name passed (a refused process reserves no
	// range) and while the snowflake branch has not failed.
	if err := waitName(); err != nil {
		return fail(err)
	}
	if err := snowflakeFailed(); err != nil {
		return fail(err)
	}
	// Each region's own store (segment.CheckRegionMark, I5): once the name
	// passed, so that a refused process records nothing.
	if err := n.await(bctx, "checking the store's region", func(ctx context.Context) error {
		return segment.CheckRegionMark(ctx, n.seg.store, n.regionMark())
	}); err != nil {
		return fail(err)
	}
	n.life.region.Watch(func(ctx context.Context) error { return segment.RegionMarkConflict(ctx, n.seg.store, n.regionMark()) })
	if n.seg.opaque, err = cfg.Store.ReadOpaqueKey(); err != nil {
		return fail(err)
	}
	if n.seg.opaque != nil {
		n.log.Info("opaque tags: key loaded", "key_id", n.seg.opaque.ID())
	}
	n.seg.engine, err = segment.New(segment.Config{
		Opaque:      n.opaquePerm,
		Regions:     n.regions(),
		PeerFloor:   n.peers.Floor,
		PeerMode:    n.peers.Mode,
		CreateCheck: n.createCheck,
		Floors:      n.seg.floors,
		Steps:       steps,
		Store:       n.seg.store,
		AutoCreate:  cfg.AutoCreates(),
		DefaultStep: cfg.Store.DefaultStep,
		Logger:      n.log,
		OnLoad:      n.onLoad,
		Announce:    n.peers,
		MaxTags:     cfg.Store.MaxTags,
		MaxStep:     cfg.Store.MaxStep,
		Clock:       n.clock,
	})
	if err != nil {
		return fail(err)
	}
	n.life.stops.push("segment engine", closer(n.seg.engine))
	if err := n.await(bctx, "loading the tags", n.seg.engine.Start); err != nil {
		return fail(fmt.Errorf("segment engine: %w", err))
	}
	n.seg.prod, err = producer.New(producer.Config{Segments: n.seg.engine, Logger: n.log, OnEmpty: n.onEmpty, Clock: n.clock})
	if err != nil {
		return fail(err)
	}
	n.life.stops.push("producer", func(ctx context.Context) error {
		n.peers.StopFloors() // before the hand-back: no node may learn this node's floors now
		n.handBack(ctx)
		return n.seg.prod.Close()
	})
	n.seg.prod.Preload()
	if err := waitAll(); err != nil {
		return err
	}
	return nil
}

// recheckName checks the name once more without JetStream (no members),
// seconds after the first check: in a NATS cluster a starting node's
// subscription reaches the other servers a route's latency later, and two
// nodes started together on two servers can both miss it in their windows
// (even with 10 ms routes). A member needs no second check: of two nodes
// started together, the one that lists the members second waits for the
// other's answer, asking again every second until its subscription has
// reached every server.
func (n *Node) recheckName(ctx context.Context) error {
	if n.peers.Members() {
		return nil
	}
	return n.await(ctx, "checking the name against the live nodes", n.checkName)
}
