package metrics

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
)

// Live are the metrics updated as things happen (the Collector reads the
// rest at scrape time). Label values are bounded: engines and codes are a
// handful; tags are capped at MaxTagSeries, the rest count as "_other".
type Live struct {
	reqSeconds  *prometheus.HistogramVec // engine
	reqCodes    *prometheus.CounterVec   // engine, code
	ids         *prometheus.CounterVec   // engine
	tagIDs      *prometheus.CounterVec   // tag
	loadSeconds prometheus.Histogram
	storeErrors prometheus.Counter

	// Pre-resolved children for the hot path.
	segSeconds, sfSeconds prometheus.Observer
	segOK, sfOK           prometheus.Counter
	segIDs, sfIDs         prometheus.Counter

	tagMu    sync.Mutex
	tagCount atomic.Int64
	tags     sync.Map // tag -> prometheus.Counter

	// http counts the HTTP API's id requests per engine, for the
	// Collector's requests_total, request_errors_total and
	// request_processing_seconds_total under endpoint "http-<engine>"
	// (the NATS endpoints' counts come from the micro service's stats).
	http map[string]*httpCounts
}

// httpCounts are one HTTP id route's counts; they only grow.
type httpCounts struct {
	requests, errors atomic.Uint64
	nanos            atomic.Int64
}

// httpEngines are the engines of the HTTP API's id routes.
var httpEngines = []string{"segment", "snowflake", "mono"}

// NewLive returns the live metrics, all at zero; Register exports them.
func NewLive() *Live {
	m := &Live{
		reqSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leafmq_request_duration_seconds",
			Help:    "Time from receiving an id request to sending its answer, by engine (segment, snowflake, mono).",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"engine"}),
		reqCodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leafmq_id_requests_total",
			Help: "Id requests answered, by engine and code (200, or the error code 400, 404, 503, 500).",
		}, []string{"engine", "code"}),
		ids: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leafmq_ids_issued_total",
			Help: "Ids handed out in answers, by engine.",
		}, []string{"engine"}),
		tagIDs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leafmq_segment_ids_issued_total",
			Help: "Segment ids handed out, by tag (at most 500 tags; the rest as _other).",
		}, []string{"tag"}),
		loadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leafmq_segment_load_seconds",
			Help:    "Time of segment load attempts (one store transaction each), successful or not.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leafmq_segment_store_errors_total",
			Help: "Segment loads that failed (store unreachable, timeouts, errors).",
		}),
	}
	m.segSeconds = m.reqSeconds.WithLabelValues("segment")
	m.sfSeconds = m.reqSeconds.WithLabelValues("snowflake")
	m.segOK = m.reqCodes.WithLabelValues("segment", "200")
	m.sfOK = m.reqCodes.WithLabelValues("snowflake", "200")
	m.segIDs = m.ids.WithLabelValues("segment")
	m.sfIDs = m.ids.WithLabelValues("snowflake")
	m.http = make(map[string]*httpCounts, len(httpEngines))
	for _, e := range httpEngines {
		m.http[e] = new(httpCounts)
	}
	return m
}

// Register registers the live metrics with reg.
func (m *Live) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.reqSeconds, m.reqCodes, m.ids, m.tagIDs, m.loadSeconds, m.storeErrors)
}

// Observe is the responder's Observe hook (responder.Config.Observe).
func (m *Live) Observe(o responder.Observation) {
	if o.Engine == "mono" { // not on the hot path of the rings
		m.reqSeconds.WithLabelValues(o.Engine).Observe(o.Took.Seconds())
		m.reqCodes.WithLabelValues(o.Engine, o.Code).Inc()
		m.ids.WithLabelValues(o.Engine).Add(float64(o.IDs))
		return
	}
	if o.Engine == "snowflake" {
		m.sfSeconds.Observe(o.Took.Seconds())
		if o.Code == "200" {
			m.sfOK.Inc()
			m.sfIDs.Add(float64(o.IDs))
			return
		}
	} else {
		m.segSeconds.Observe(o.Took.Seconds())
		if o.Code == "200" {
			m.segOK.Inc()
			m.segIDs.Add(float64(o.IDs))
			m.tag(o.Tag).Add(float64(o.IDs))
			return
		}
	}
	m.reqCodes.WithLabelValues(o.Engine, o.Code).Inc()
}

// ObserveHTTP is the HTTP API's Observe hook (httpapi.Config.Observe). Its requests count in the
// same series as NATS requests (ids issued, requests by code, latency), so
// dashboards and alerts see HTTP-only clients; endpoint "http-<engine>" of
// requests_total tells the transports apart without a label that would
// split every existing series. A mono request over HTTP is a NATS request
// to the tag's leader, which counts it there: here it counts only as an
// HTTP request, so that its ids are not counted twice.
func (m *Live) ObserveHTTP(o httpapi.Observation) {
	if c := m.http[o.Engine]; c != nil {
		c.requests.Add(1)
		if o.Code != 200 {
			c.errors.Add(1)
		}
		c.nanos.Add(int64(o.Took))
	}
	if o.Engine == "mono" {
		return
	}
	m.Observe(responder.Observation{Engine: o.Engine, Tag: o.Tag, Code: strconv.Itoa(o.Code), IDs: o.IDs, Took: o.Took})
}

// ObserveLoad is the segment engine's load hook (segment.Config.OnLoad):
// the time of every load attempt, and the failed ones.
func (m *Live) ObserveLoad(ev segment.LoadEvent) {
	m.loadSeconds.Observe(ev.Took.Seconds())
	if ev.Err != nil {
		m.storeErrors.Inc()
	}
}

func (m *Live) tag(tag string) prometheus.Counter {
	if c, ok := m.tags.Load(tag); ok {
		return c.(prometheus.Counter)
	}
	m.tagMu.Lock()
	defer m.tagMu.Unlock()
	if c, ok := m.tags.Load(tag); ok {
		return c.(prometheus.Counter)
	}
	if m.tagCount.Load() >= MaxTagSeries {
		return m.tagIDs.WithLabelValues("_other")
	}
	c := m.tagIDs.WithLabelValues(tag)
	m.tags.Store(tag, c)
	m.tagCount.Add(1)
	return c
}
