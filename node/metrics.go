package node

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/metrics"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/wire"
)

// probeEvery is how often a node probes each subject it serves
// (responder.Prober).
var probeEvery = responder.DefaultProbeEvery

// startProbes starts the self-probes and warns of the streams an id
// depends on that are not replicated.
func (n *Node) startProbes(ctx context.Context) error {
	p, err := responder.StartProber(responder.ProberConfig{Conn: n.conn.NC(), Targets: n.probeTargets,
		Node: n.cfg.Name, Every: probeEvery, Clock: n.clock, Logger: n.log})
	if err != nil {
		return err
	}
	n.serve.probe = p
	n.life.stops.push("self-probes", func(context.Context) error { p.Close(); return nil })
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	n.warnUnreplicated(wctx)
	cancel()
	return nil
}

// probeTargets are the subjects the node serves now.
func (n *Node) probeTargets() responder.ProbeTargets {
	var t responder.ProbeTargets
	if n.serve.resp != nil {
		t.Segment, t.Snowflake = n.serve.resp.SegmentService() != nil, n.serve.resp.SnowflakeService() != nil
	}
	t.Mono = n.seg.mono.Load().LeadingTags()
	return t
}

// collector reads the node's state at each scrape (metrics.Collector).
func (n *Node) collector() prometheus.Collector {
	s := metrics.Sources{
		Subjects: func() []wire.SubjectStatus {
			subjects, _, _ := n.readiness()
			return subjects
		},
		Failing: func() []metrics.FailingTag {
			var out []metrics.FailingTag
			for _, f := range n.failingTags() {
				out = append(out, metrics.FailingTag{Tag: f.Tag, Refused: f.Refused()})
			}
			return out
		},
		RTT:        n.conn.RTT,
		ProbesSent: n.serve.probe.Sent,
		HTTP:       n.met,
		Snowflake:  n.serve.sf,
		Events:     n.events.Counts,
	}
	// Set before the collector, and not changed while it is registered;
	// a nil one stays a nil interface.
	if n.serve.resp != nil {
		s.Responder = n.serve.resp
	}
	if n.seg.pool != nil {
		s.Pool = n.seg.pool
	}
	if n.seg.prod != nil {
		s.Rings = n.seg.prod.Rings
	}
	if n.seg.engine != nil {
		s.Engine = n.seg.engine
	}
	return metrics.NewCollector(s)
}
