package node

import (
	"context"
	"fmt"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/segment"
)

// onLoad is the segment engine's OnLoad hook: metrics and events of every
// load attempt, and the tags whose loads fail (n.seg.health). It runs on
// the engine's loader goroutine and must not block (events.Publisher does
// not).
func (n *Node) onLoad(ev segment.LoadEvent) {
	n.met.ObserveLoad(ev)
	f, recovered := n.seg.health.Record(ev, n.clock.Now())
	if ev.Err != nil {
		n.events.Emit(events.Event{Kind: events.StoreError, Level: events.Error, Tag: ev.Tag,
			Message: fmt.Sprintf("loading a segment of %s failed: %v", ev.Tag, ev.Err),
			Fields:  map[string]any{"error": ev.Err.Error(), "failures": f.Failures, "took_ms": ev.Took.Milliseconds()}})
		return
	}
	if recovered {
		n.events.Emit(events.Event{Kind: events.StoreRecovered, Tag: ev.Tag,
			Message: fmt.Sprintf("segments of %s load again after %d failures", ev.Tag, f.Failures),
			Fields:  map[string]any{"failures": f.Failures, "down_ms": n.clock.Since(f.Since).Milliseconds()}})
	}
	n.events.Emit(events.Event{Kind: events.SegmentLoaded, Tag: ev.Tag,
		Message: fmt.Sprintf("segment [%d, %d) of %s loaded", ev.Start, ev.End, ev.Tag),
		Fields: map[string]any{"start": ev.Start, "end": ev.End, "step": ev.Step, "prev_step": ev.PrevStep,
			"took_ms": ev.Took.Milliseconds()}})
	if ev.PrevStep != 0 && ev.Step != ev.PrevStep {
		n.events.Emit(events.Event{Kind: events.SegmentStep, Tag: ev.Tag,
			Message: fmt.Sprintf("step of %s changed from %d to %d", ev.Tag, ev.PrevStep, ev.Step),
			Fields:  map[string]any{"step": ev.Step, "prev_step": ev.PrevStep, "reason": "dynamic"}})
	}
}

// onEmpty is the producer's OnEmpty hook.
func (n *Node) onEmpty(tag string) {
	n.events.Emit(events.Event{Kind: events.RingEmpty, Level: events.Warn, Tag: tag,
		Message: fmt.Sprintf("a request found the ring of %s empty", tag)})
}

// newEvents makes the node's event publisher, on its NATS connection.
func (n *Node) newEvents(context.Context) error {
	n.events = events.New(events.Config{Node: n.cfg.Name, Publish: n.conn.NC().Publish, Clock: n.clock, Logger: n.log})
	return nil
}

// sayGoodbye is the last thing a started node does while NATS is up.
func (n *Node) sayGoodbye(context.Context) error {
	n.events.Emit(events.Event{Kind: events.NodeDown, Message: "leafd stopping"})
	return nil
}

// announceStarted is Start's last phase: the NodeUp event and the log.
func (n *Node) announceStarted(context.Context) error {
	cfg := n.cfg
	n.events.Emit(events.Event{Kind: events.NodeUp, Message: "leafd " + buildinfo.Version + " started",
		Fields: map[string]any{"version": buildinfo.Version, "store": n.storeKind(), "worker_registry": cfg.Registry.Kind,
			"worker": n.snowflakeWorker(), "nats": n.ClientURL()}})
	n.log.Info("leafd started", "nats", n.ClientURL(), "http", n.HTTPAddr(), "store", n.storeKind(),
		"auto_create", cfg.AutoCreates(), "tags", len(n.seg.engine.Tags()), "worker_registry", cfg.Registry.Kind,
		"worker", n.snowflakeWorker())
	return nil
}
