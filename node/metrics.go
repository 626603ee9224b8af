package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// collector reads the node's state at scrape time, so the request path pays
// nothing for metrics.
type collector struct {
	n        *Node
	requests *prometheus.Desc
	errors   *prometheus.Desc
	procSecs *prometheus.Desc
	ringLen  *prometheus.Desc
	ringCap  *prometheus.Desc
	takes    *prometheus.Desc
	rejTakes *prometheus.Desc
	rejPuts  *prometheus.Desc
	refills  *prometheus.Desc
	tags     *prometheus.Desc
	loads    *prometheus.Desc
	asyncErr *prometheus.Desc
	step     *prometheus.Desc
	ready    *prometheus.Desc

	sfState   *prometheus.Desc
	sfWorker  *prometheus.Desc
	sfLease   *prometheus.Desc
	sfChanges *prometheus.Desc
	sfLeft    *prometheus.Desc
	sfRingLen *prometheus.Desc
	sfRingCap *prometheus.Desc
	sfTakes   *prometheus.Desc
	sfDropped *prometheus.Desc
	sfOffset  *prometheus.Desc
	evSent    *prometheus.Desc
	evDropped *prometheus.Desc
	ringFill  *prometheus.Desc
	poolLevel *prometheus.Desc
	poolWaste *prometheus.Desc

	serving  *prometheus.Desc
	subReady *prometheus.Desc
	probed   *prometheus.Desc
	probes   *prometheus.Desc
	refused  *prometheus.Desc
	natsRTT  *prometheus.Desc
}

func newCollector(n *Node) *collector {
	// No constant labels: Prometheus's instance names the node;
	// leafmq_build_info carries its --name.
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("leafmq_"+name, help, labels, nil)
	}
	return &collector{
		n:        n,
		requests: d("requests_total", "Requests answered by endpoint (the NATS micro endpoints; http-segment, http-snowflake, http-mono: the HTTP API's id routes).", "endpoint"),
		errors:   d("request_errors_total", "Requests answered with an error, by endpoint (worker-errors: requests a worker finished, of any endpoint: a store outage's 503s).", "endpoint"),
		procSecs: d("request_processing_seconds_total", "Time spent in handlers, by endpoint.", "endpoint"),
		asyncErr: d("worker_request_errors_total", "Requests answered with an error by a worker (also in request_errors_total{endpoint=\"worker-errors\"})."),
		ringLen:  d("ring_ids", "Ids ready in the ring of a tag.", "tag"),
		ringCap:  d("ring_capacity", "Capacity of the ring of a tag.", "tag"),
		takes:    d("ring_takes_total", "Ids taken from the ring of a tag.", "tag"),
		rejTakes: d("ring_rejected_takes_total", "Takes that found the ring of a tag empty.", "tag"),
		rejPuts:  d("ring_rejected_puts_total", "Ids dropped because the ring of a tag was full.", "tag"),
		refills:  d("ring_refills_total", "Refills of the ring of a tag.", "tag"),
		tags:     d("segment_tags", "Tags known to the segment engine."),
		loads:    d("segment_loads_total", "Segments loaded from the store (one store transaction each), by tag.", "tag"),
		step:     d("segment_step", "Step of the last segment loaded, by tag (dynamic step).", "tag"),
		ready:    d("segment_ids_ready", "Ids left in both segment buffers of a tag.", "tag"),

		sfState:   d("snowflake_state", "1 for the snowflake source's current state (waiting, serving, paused, lost, closed).", "state"),
		sfWorker:  d("snowflake_worker", "Snowflake worker id in use; -1 while there is none."),
		sfLease:   d("snowflake_lease_until_timestamp_seconds", "Unix time up to which the worker's time lease is persisted."),
		sfChanges: d("snowflake_state_changes_total", "Changes of the snowflake source's state (each also an event on leaf.events.snowflake)."),
		sfLeft:    d("snowflake_layout_remaining_seconds", "Time left before the layout's time bits run out."),
		sfRingLen: d("snowflake_ring_ids", "Snowflake ids ready in the ring."),
		sfRingCap: d("snowflake_ring_capacity", "Capacity of the snowflake ring."),
		sfTakes:   d("snowflake_ring_takes_total", "Snowflake ids handed out (from the ring, or straight from the engine for large requests)."),
		sfDropped: d("snowflake_ring_dropped_total", "Snowflake ids thrown away for sitting in the ring longer than its max age."),
		sfOffset:  d("snowflake_peer_clock_offset_seconds", "The live peers' average clock minus this node's, measured at start and every 30s (0 without peers)."),
		evSent:    d("events_published_total", "Events published on leaf.events.<kind>, by kind.", "kind"),
		evDropped: d("events_suppressed_total", "Events dropped by the per-kind-and-tag rate limit, by kind.", "kind"),
		ringFill:  d("ring_fill_ratio", "Ids ready in the ring of a tag over its capacity.", "tag"),
		poolLevel: d("pool_batches", "Batches in a JetStream pool at this node's last check, by pool subject.", "subject"),
		poolWaste: d("pool_refused_ids_total", "Ids taken for pool batches the stream refused (it was full; a gap)."),

		serving:  d("subject_serving", "1 while the node serves the subject (segment, snowflake, mono, pool): subscribed, in the queue group.", "subject"),
		subReady: d("subject_ready", "1 while the node serves the subject and can answer it with ids (/readyz/<subject>).", "subject"),
		probed:   d("probes_answered_total", "Self-probes that reached this node's own subscription of the subject through NATS and were answered: flat while the node serves the subject means requests no longer reach it.", "subject"),
		probes:   d("probe_requests_total", "Self-probes this node sent on a subject it serves, by result (answered by some node, or failed: no responders, timeout).", "subject", "result"),
		natsRTT:  d("nats_rtt_seconds", "The node's round trip to its NATS server, measured every 5s off the request path (0 when unknown); above --max-nats-rtt the node is not ready for segment, snowflake and monotonic tags."),
		refused:  d("segment_tag_refused", "1 for a tag this node refuses until an operator acts (an opaque tag's key it lacks, a mode conflict, a store below the ids already issued); the node stays ready for other tags.", "tag"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.errors, c.procSecs, c.ringLen, c.ringCap,
		c.takes, c.rejTakes, c.rejPuts, c.refills, c.tags, c.loads, c.step, c.ready, c.asyncErr,
		c.sfState, c.sfWorker, c.sfLease, c.sfChanges, c.sfLeft, c.sfRingLen, c.sfRingCap, c.sfTakes, c.sfDropped,
		c.sfOffset, c.evSent, c.evDropped, c.ringFill, c.poolLevel, c.poolWaste,
		c.serving, c.subReady, c.probed, c.probes, c.refused, c.natsRTT} {
		ch <- d
	}
}

// maxTagSeries caps per-tag series so a node with many tags cannot blow up
// the scrape.
const maxTagSeries = 500

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	subjects, _, _ := n.readiness()
	ch <- prometheus.MustNewConstMetric(c.natsRTT, prometheus.GaugeValue, n.conn.rtt.Load().rtt().Seconds())
	sent := n.serve.probe.counts()
	for _, s := range subjects {
		ch <- prometheus.MustNewConstMetric(c.serving, prometheus.GaugeValue, b2f(s.Serving), s.Subject)
		ch <- prometheus.MustNewConstMetric(c.subReady, prometheus.GaugeValue, b2f(s.Ready), s.Subject)
		if s.Subject != wire.SubjectPool { // the pool has no subscription to probe
			ch <- prometheus.MustNewConstMetric(c.probed, prometheus.CounterValue, float64(s.Probed), s.Subject)
			for _, result := range []string{probeAnswered, probeFailed} {
				ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue,
					float64(sent[probeKey{s.Subject, result}]), s.Subject, result)
			}
		}
	}
	for i, f := range n.failingTags() {
		if i == maxTagSeries {
			break
		}
		if tagRefused(f.Err) {
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, 1, f.Tag)
		}
	}
	if n.serve.resp != nil {
		ch <- prometheus.MustNewConstMetric(c.asyncErr, prometheus.CounterValue, float64(n.serve.resp.AsyncErrors()))
		eps := n.serve.resp.Service().Stats().Endpoints
		if sf := n.serve.resp.SnowflakeService(); sf != nil {
			// Recreated at each rejoin: its counters then start again at 0,
			// which rate() treats as a counter reset.
			eps = append(eps, sf.Stats().Endpoints...)
		}
		for _, e := range eps {
			ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(e.NumErrors), e.Name)
			if e.Name == responder.WorkerErrorsEndpoint {
				continue // errors of requests already counted where they arrived
			}
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(e.NumRequests), e.Name)
			ch <- prometheus.MustNewConstMetric(c.procSecs, prometheus.CounterValue, e.ProcessingTime.Seconds(), e.Name)
		}
	}
	for _, e := range httpEngines {
		hc, name := n.met.http[e], "http-"+e
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(hc.requests.Load()), name)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(hc.errors.Load()), name)
		ch <- prometheus.MustNewConstMetric(c.procSecs, prometheus.CounterValue, float64(hc.nanos.Load())/1e9, name)
	}
	if src := n.serve.sf.Source(); src != nil {
		cur := src.State()
		for st := snowflake.StateWaiting; st <= snowflake.StateClosed; st++ {
			v := 0.0
			if st == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.sfState, prometheus.GaugeValue, v, st.String())
		}
		ch <- prometheus.MustNewConstMetric(c.sfWorker, prometheus.GaugeValue, float64(src.Worker()))
		ch <- prometheus.MustNewConstMetric(c.sfLease, prometheus.GaugeValue, float64(src.Leased().UnixNano())/1e9)
		ch <- prometheus.MustNewConstMetric(c.sfChanges, prometheus.CounterValue, float64(n.serve.sf.Transitions()))
		ch <- prometheus.MustNewConstMetric(c.sfLeft, prometheus.GaugeValue, n.serve.sf.Remaining().Seconds())
		ch <- prometheus.MustNewConstMetric(c.sfOffset, prometheus.GaugeValue, n.serve.sf.Offset().Seconds())
	}
	if p := n.seg.pool; p != nil {
		for subject, level := range p.Levels() {
			ch <- prometheus.MustNewConstMetric(c.poolLevel, prometheus.GaugeValue, float64(level), subject)
		}
		ch <- prometheus.MustNewConstMetric(c.poolWaste, prometheus.CounterValue, float64(p.Wasted()))
	}
	for _, ec := range n.events.Counts() {
		ch <- prometheus.MustNewConstMetric(c.evSent, prometheus.CounterValue, float64(ec.Published), ec.Kind)
		ch <- prometheus.MustNewConstMetric(c.evDropped, prometheus.CounterValue, float64(ec.Suppressed), ec.Kind)
	}
	if r := n.serve.sf.Ring(); r != nil {
		st := r.Stats()
		ch <- prometheus.MustNewConstMetric(c.sfRingLen, prometheus.GaugeValue, float64(st.Len))
		ch <- prometheus.MustNewConstMetric(c.sfRingCap, prometheus.GaugeValue, float64(st.Cap))
		ch <- prometheus.MustNewConstMetric(c.sfTakes, prometheus.CounterValue, float64(st.Served))
		ch <- prometheus.MustNewConstMetric(c.sfDropped, prometheus.CounterValue, float64(st.Dropped))
	}
	if n.seg.prod != nil {
		for i, r := range n.seg.prod.Rings() {
			if i == maxTagSeries {
				break
			}
			ch <- prometheus.MustNewConstMetric(c.ringLen, prometheus.GaugeValue, float64(r.Len), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.ringCap, prometheus.GaugeValue, float64(r.Cap), r.Tag)
			if r.Cap > 0 {
				ch <- prometheus.MustNewConstMetric(c.ringFill, prometheus.GaugeValue, float64(r.Len)/float64(r.Cap), r.Tag)
			}
			ch <- prometheus.MustNewConstMetric(c.takes, prometheus.CounterValue, float64(r.Stats.Takes), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.rejTakes, prometheus.CounterValue, float64(r.Stats.RejectedTakes), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.rejPuts, prometheus.CounterValue, float64(r.Stats.RejectedPuts), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.refills, prometheus.CounterValue, float64(r.Stats.Refills), r.Tag)
		}
	}
	if n.seg.engine != nil {
		tags := n.seg.engine.Tags()
		ch <- prometheus.MustNewConstMetric(c.tags, prometheus.GaugeValue, float64(len(tags)))
		for i, tag := range tags {
			if i == maxTagSeries {
				break
			}
			st, ok := n.seg.engine.State(tag.String())
			if !ok {
				continue
			}
			var ready int64
			for _, sg := range st.Segments {
				if sg.Ready {
					ready += sg.Max - sg.Value
				}
			}
			ch <- prometheus.MustNewConstMetric(c.loads, prometheus.CounterValue, float64(st.Loads), tag.String())
			ch <- prometheus.MustNewConstMetric(c.step, prometheus.GaugeValue, float64(st.Step), tag.String())
			ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(ready), tag.String())
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
