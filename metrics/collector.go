package metrics

import (
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Sources are what a Collector reads at each scrape. A nil field leaves
// its metrics out, as a node leaves out an engine it does not run.
type Sources struct {
	// Subjects is each subject's readiness (wire.NodeStatus.Subjects).
	Subjects func() []wire.SubjectStatus
	// Failing are the tags whose segment loads fail now, sorted by tag.
	Failing func() []FailingTag
	// RTT is the round trip to NATS, 0 when unknown.
	RTT func() time.Duration
	// ProbesSent are the self-probes sent, by subject and result
	// (responder.Prober.Sent).
	ProbesSent func() map[responder.ProbeKey]uint64
	// Responder is the NATS micro services' counts.
	Responder Responder
	// HTTP counts the HTTP API's id requests (Live.ObserveHTTP).
	HTTP *Live
	// Snowflake is the snowflake source's server (snownode.Server).
	Snowflake Snowflake
	// Pool is the JetStream pools' filler (pool.Filler).
	Pool Pool
	// Events are the events published and suppressed, by kind
	// (events.Publisher.Counts).
	Events func() []events.Count
	// Rings are the segment tags' rings (producer.Producer.Rings).
	Rings func() []producer.RingState
	// Engine is the segment engine (segment.Engine).
	Engine Engine
}

// FailingTag is a tag whose segment loads fail; Refused when it fails for
// a reason of the tag alone, refused on this node until an operator acts.
type FailingTag struct {
	Tag     string
	Refused bool
}

// Responder is what the Collector reads of a responder.Responder.
type Responder interface {
	AsyncErrors() uint64
	Endpoints() []*micro.EndpointStats
}

// Snowflake is what the Collector reads of a snownode.Server.
type Snowflake interface {
	Source() *snowflake.Source // nil: no snowflake metrics
	Ring() *producer.Snowflake // nil: no snowflake ring metrics
	Transitions() uint64
	Remaining() time.Duration
	Offset() time.Duration
	// WorkerIDs is the worker ids of the node's region: the free ones (as
	// last counted off the request path) and the capacity; ok false: none
	// counted.
	WorkerIDs() (free, capacity int64, ok bool)
	Region() string // the node's region's name, "" without regions
}

// Pool is what the Collector reads of a pool.Filler.
type Pool interface {
	Levels() map[string]int
	Wasted() uint64
}

// Engine is what the Collector reads of a segment.Engine.
type Engine interface {
	Tags() []wire.Tag
	State(tag string) (segment.TagState, bool)
}

// Collector reads a node's state at scrape time, so the request path pays
// nothing for metrics.
type Collector struct {
	src      Sources
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
	headroom *prometheus.Desc

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
	sfFree    *prometheus.Desc
	sfCap     *prometheus.Desc
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

// NewCollector returns the Collector of src.
func NewCollector(src Sources) *Collector {
	// No constant labels: Prometheus's instance names the node;
	// leafmq_build_info carries its --name.
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("leafmq_"+name, help, labels, nil)
	}
	return &Collector{
		src:      src,
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
		headroom: d("segment_headroom_ids", "A tag's capacity runway: its ids left above the ranges this node reserved, before its domain ends (2^63-1, an opaque tag's 2^W-1; over --regions with regions). Shown once the tag loaded a range.", "tag"),

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
		sfFree:    d("snowflake_worker_ids_free", "A region's worker id runway: the worker ids its registry can still give a new node (capacity less those held: live claims on JetStream KV; every id handed out on ZooKeeper and MySQL, which never hand one out again), as this node last counted them (every 30s, while its snowflake runs). Absent with a static worker id.", "region"),
		sfCap:     d("snowflake_worker_ids_capacity", "Worker ids of a region: 2^(worker bits of the layout, less the region bits).", "region"),
		evSent:    d("events_published_total", "Events published on leaf.events.<kind>, by kind.", "kind"),
		evDropped: d("events_suppressed_total", "Events dropped by the per-kind-and-tag rate limit, by kind.", "kind"),
		ringFill:  d("ring_fill_ratio", "Ids ready in the ring of a tag over its capacity.", "tag"),
		poolLevel: d("pool_batches", "Batches in a JetStream pool at this node's last check, by pool subject.", "subject"),
		poolWaste: d("pool_refused_ids_total", "Ids taken for pool batches the stream refused (it was full; a gap)."),

		serving:  d("subject_serving", "1 while the node serves the subject (segment, snowflake, mono, pool): subscribed, in the queue group.", "subject"),
		subReady: d("subject_ready", "1 while the node serves the subject and can answer it with ids (/readyz/<subject>).", "subject"),
		probed:   d("probes_answered_total", "Self-probes that reached this node's own subscription of the subject through NATS and were answered: flat while the node serves the subject means requests no longer reach it.", "subject"),
		probes:   d("probe_requests_total", "Self-probes this node sent on a subject it serves, by result (answered by some node, or failed: no responders, timeout).", "subject", "result"),
		natsRTT:  d("nats_rtt_seconds", "The node's round trip to NATS, the worst of its connections (main and queue-group memberships), measured every 5s off the request path (0 when unknown); above --max-nats-rtt the node is not ready for segment, snowflake and monotonic tags."),
		refused:  d("segment_tag_refused", "1 for a tag this node refuses until an operator acts (an opaque tag's key it lacks, a mode conflict, a store below the ids already issued); the node stays ready for other tags.", "tag"),
	}
}

// Describe is prometheus.Collector's.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.errors, c.procSecs, c.ringLen, c.ringCap,
		c.takes, c.rejTakes, c.rejPuts, c.refills, c.tags, c.loads, c.step, c.ready, c.headroom, c.asyncErr,
		c.sfState, c.sfWorker, c.sfLease, c.sfChanges, c.sfLeft, c.sfRingLen, c.sfRingCap, c.sfTakes, c.sfDropped,
		c.sfOffset, c.sfFree, c.sfCap, c.evSent, c.evDropped, c.ringFill, c.poolLevel, c.poolWaste,
		c.serving, c.subReady, c.probed, c.probes, c.refused, c.natsRTT} {
		ch <- d
	}
}

// MaxTagSeries caps the series by tag, so a node with many tags cannot
// blow up the scrape.
const MaxTagSeries = 500

// Collect is prometheus.Collector's.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src
	if s.RTT != nil {
		ch <- prometheus.MustNewConstMetric(c.natsRTT, prometheus.GaugeValue, s.RTT().Seconds())
	}
	sent := map[responder.ProbeKey]uint64{}
	if s.ProbesSent != nil {
		sent = s.ProbesSent()
	}
	var subjects []wire.SubjectStatus
	if s.Subjects != nil {
		subjects = s.Subjects()
	}
	for _, sub := range subjects {
		ch <- prometheus.MustNewConstMetric(c.serving, prometheus.GaugeValue, b2f(sub.Serving), sub.Subject)
		ch <- prometheus.MustNewConstMetric(c.subReady, prometheus.GaugeValue, b2f(sub.Ready), sub.Subject)
		if sub.Subject != wire.SubjectPool { // the pool has no subscription to probe
			ch <- prometheus.MustNewConstMetric(c.probed, prometheus.CounterValue, float64(sub.Probed), sub.Subject)
			for _, result := range []string{responder.ProbeAnswered, responder.ProbeFailed} {
				ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue,
					float64(sent[responder.ProbeKey{Subject: sub.Subject, Result: result}]), sub.Subject, result)
			}
		}
	}
	if s.Failing != nil {
		for i, f := range s.Failing() {
			if i == MaxTagSeries {
				break
			}
			if f.Refused {
				ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, 1, f.Tag)
			}
		}
	}
	if r := s.Responder; r != nil {
		ch <- prometheus.MustNewConstMetric(c.asyncErr, prometheus.CounterValue, float64(r.AsyncErrors()))
		// The snowflake endpoints' counters start again at 0 at each
		// rejoin (Endpoints), which rate() treats as a counter reset.
		for _, e := range r.Endpoints() {
			ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(e.NumErrors), e.Name)
			if e.Name == responder.WorkerErrorsEndpoint {
				continue // errors of requests already counted where they arrived
			}
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(e.NumRequests), e.Name)
			ch <- prometheus.MustNewConstMetric(c.procSecs, prometheus.CounterValue, e.ProcessingTime.Seconds(), e.Name)
		}
	}
	if s.HTTP != nil {
		for _, e := range httpEngines {
			hc, name := s.HTTP.http[e], "http-"+e
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(hc.requests.Load()), name)
			ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(hc.errors.Load()), name)
			ch <- prometheus.MustNewConstMetric(c.procSecs, prometheus.CounterValue, float64(hc.nanos.Load())/1e9, name)
		}
	}
	if sf := s.Snowflake; sf != nil {
		if src := sf.Source(); src != nil {
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
			ch <- prometheus.MustNewConstMetric(c.sfChanges, prometheus.CounterValue, float64(sf.Transitions()))
			ch <- prometheus.MustNewConstMetric(c.sfLeft, prometheus.GaugeValue, sf.Remaining().Seconds())
			ch <- prometheus.MustNewConstMetric(c.sfOffset, prometheus.GaugeValue, sf.Offset().Seconds())
			if free, capacity, ok := sf.WorkerIDs(); ok {
				ch <- prometheus.MustNewConstMetric(c.sfFree, prometheus.GaugeValue, float64(free), sf.Region())
				ch <- prometheus.MustNewConstMetric(c.sfCap, prometheus.GaugeValue, float64(capacity), sf.Region())
			}
		}
	}
	if p := s.Pool; p != nil {
		for subject, level := range p.Levels() {
			ch <- prometheus.MustNewConstMetric(c.poolLevel, prometheus.GaugeValue, float64(level), subject)
		}
		ch <- prometheus.MustNewConstMetric(c.poolWaste, prometheus.CounterValue, float64(p.Wasted()))
	}
	if s.Events != nil {
		for _, ec := range s.Events() {
			ch <- prometheus.MustNewConstMetric(c.evSent, prometheus.CounterValue, float64(ec.Published), ec.Kind)
			ch <- prometheus.MustNewConstMetric(c.evDropped, prometheus.CounterValue, float64(ec.Suppressed), ec.Kind)
		}
	}
	if s.Snowflake != nil {
		if r := s.Snowflake.Ring(); r != nil {
			st := r.Stats()
			ch <- prometheus.MustNewConstMetric(c.sfRingLen, prometheus.GaugeValue, float64(st.Len))
			ch <- prometheus.MustNewConstMetric(c.sfRingCap, prometheus.GaugeValue, float64(st.Cap))
			ch <- prometheus.MustNewConstMetric(c.sfTakes, prometheus.CounterValue, float64(st.Served))
			ch <- prometheus.MustNewConstMetric(c.sfDropped, prometheus.CounterValue, float64(st.Dropped))
		}
	}
	if s.Rings != nil {
		for i, r := range s.Rings() {
			if i == MaxTagSeries {
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
	if e := s.Engine; e != nil {
		tags := e.Tags()
		ch <- prometheus.MustNewConstMetric(c.tags, prometheus.GaugeValue, float64(len(tags)))
		for i, tag := range tags {
			if i == MaxTagSeries {
				break
			}
			st, ok := e.State(tag.String())
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
			if st.Headroom >= 0 {
				ch <- prometheus.MustNewConstMetric(c.headroom, prometheus.GaugeValue, float64(st.Headroom), tag.String())
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
