package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/metrics"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/ringbuf"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

type fakePool struct{}

func (fakePool) Levels() map[string]int { return map[string]int{"leaf.pool.snowflake": 7} }
func (fakePool) Wasted() uint64         { return 3 }

type fakeResponder struct{}

func (fakeResponder) AsyncErrors() uint64 { return 2 }
func (fakeResponder) Endpoints() []*micro.EndpointStats {
	return []*micro.EndpointStats{
		{Name: "segment", NumRequests: 10, NumErrors: 1, ProcessingTime: 2 * time.Second},
		{Name: responder.WorkerErrorsEndpoint, NumRequests: 2, NumErrors: 2},
	}
}

type fakeEngine struct{}

func (fakeEngine) Tags() []wire.Tag { return []wire.Tag{wire.MustTag("web")} }
func (fakeEngine) State(tag string) (segment.TagState, bool) {
	var st segment.TagState
	st.Loads, st.Step = 4, 1000
	st.Segments[0] = segment.SegmentState{Value: 100, Max: 1000, Ready: true}
	st.Segments[1] = segment.SegmentState{Value: 1000, Max: 2000, Ready: false}
	st.Headroom = 1<<20 - 2000 // an opaque tag of width 20
	return st, tag == "web"
}

// The collector reads its Sources at each scrape under the names, help
// texts and labels that deploy/alerts.yml and the dashboards use.
func TestCollectorReadsSources(t *testing.T) {
	c := metrics.NewCollector(metrics.Sources{
		Subjects: func() []wire.SubjectStatus {
			return []wire.SubjectStatus{
				{Subject: wire.SubjectSegment, Serving: true, Ready: true, Probed: 5},
				{Subject: wire.SubjectPool, Serving: true},
			}
		},
		Failing: func() []metrics.FailingTag {
			return []metrics.FailingTag{{Tag: "down"}, {Tag: "keyless", Refused: true}}
		},
		RTT: func() time.Duration { return 1500 * time.Microsecond },
		ProbesSent: func() map[responder.ProbeKey]uint64 {
			return map[responder.ProbeKey]uint64{{Subject: wire.SubjectSegment, Result: responder.ProbeAnswered}: 6}
		},
		Responder: fakeResponder{},
		Pool:      fakePool{},
		Events:    func() []events.Count { return []events.Count{{Kind: "node.up", Published: 1, Suppressed: 2}} },
		Rings: func() []producer.RingState {
			return []producer.RingState{{Tag: "web", Len: 25, Cap: 100, Stats: ringbuf.Stats{Takes: 9}}}
		},
		Engine: fakeEngine{},
	})
	want := `
# HELP leafmq_nats_rtt_seconds The node's round trip to NATS, the worst of its connections (main and queue-group memberships), measured every 5s off the request path (0 when unknown); above --max-nats-rtt the node is not ready for segment, snowflake and monotonic tags.
# TYPE leafmq_nats_rtt_seconds gauge
leafmq_nats_rtt_seconds 0.0015
# HELP leafmq_subject_serving 1 while the node serves the subject (segment, snowflake, mono, pool): subscribed, in the queue group.
# TYPE leafmq_subject_serving gauge
leafmq_subject_serving{subject="pool"} 1
leafmq_subject_serving{subject="segment"} 1
# HELP leafmq_subject_ready 1 while the node serves the subject and can answer it with ids (/readyz/<subject>).
# TYPE leafmq_subject_ready gauge
leafmq_subject_ready{subject="pool"} 0
leafmq_subject_ready{subject="segment"} 1
# HELP leafmq_probes_answered_total Self-probes that reached this node's own subscription of the subject through NATS and were answered: flat while the node serves the subject means requests no longer reach it.
# TYPE leafmq_probes_answered_total counter
leafmq_probes_answered_total{subject="segment"} 5
# HELP leafmq_probe_requests_total Self-probes this node sent on a subject it serves, by result (answered by some node, or failed: no responders, timeout).
# TYPE leafmq_probe_requests_total counter
leafmq_probe_requests_total{result="answered",subject="segment"} 6
leafmq_probe_requests_total{result="failed",subject="segment"} 0
# HELP leafmq_segment_tag_refused 1 for a tag this node refuses until an operator acts (an opaque tag's key it lacks, a mode conflict, a store below the ids already issued); the node stays ready for other tags.
# TYPE leafmq_segment_tag_refused gauge
leafmq_segment_tag_refused{tag="keyless"} 1
# HELP leafmq_requests_total Requests answered by endpoint (the NATS micro endpoints; http-segment, http-snowflake, http-mono: the HTTP API's id routes).
# TYPE leafmq_requests_total counter
leafmq_requests_total{endpoint="segment"} 10
# HELP leafmq_request_errors_total Requests answered with an error, by endpoint (worker-errors: requests a worker finished, of any endpoint: a store outage's 503s).
# TYPE leafmq_request_errors_total counter
leafmq_request_errors_total{endpoint="segment"} 1
leafmq_request_errors_total{endpoint="worker-errors"} 2
# HELP leafmq_request_processing_seconds_total Time spent in handlers, by endpoint.
# TYPE leafmq_request_processing_seconds_total counter
leafmq_request_processing_seconds_total{endpoint="segment"} 2
# HELP leafmq_worker_request_errors_total Requests answered with an error by a worker (also in request_errors_total{endpoint="worker-errors"}).
# TYPE leafmq_worker_request_errors_total counter
leafmq_worker_request_errors_total 2
# HELP leafmq_pool_batches Batches in a JetStream pool at this node's last check, by pool subject.
# TYPE leafmq_pool_batches gauge
leafmq_pool_batches{subject="leaf.pool.snowflake"} 7
# HELP leafmq_pool_refused_ids_total Ids taken for pool batches the stream refused (it was full; a gap).
# TYPE leafmq_pool_refused_ids_total counter
leafmq_pool_refused_ids_total 3
# HELP leafmq_events_suppressed_total Events dropped by the per-kind-and-tag rate limit, by kind.
# TYPE leafmq_events_suppressed_total counter
leafmq_events_suppressed_total{kind="node.up"} 2
# HELP leafmq_ring_fill_ratio Ids ready in the ring of a tag over its capacity.
# TYPE leafmq_ring_fill_ratio gauge
leafmq_ring_fill_ratio{tag="web"} 0.25
# HELP leafmq_ring_takes_total Ids taken from the ring of a tag.
# TYPE leafmq_ring_takes_total counter
leafmq_ring_takes_total{tag="web"} 9
# HELP leafmq_segment_tags Tags known to the segment engine.
# TYPE leafmq_segment_tags gauge
leafmq_segment_tags 1
# HELP leafmq_segment_ids_ready Ids left in both segment buffers of a tag.
# TYPE leafmq_segment_ids_ready gauge
leafmq_segment_ids_ready{tag="web"} 900
# HELP leafmq_segment_headroom_ids A tag's capacity runway: its ids left above the ranges this node reserved, before its domain ends (2^63-1, an opaque tag's 2^W-1; over --regions with regions). Shown once the tag loaded a range.
# TYPE leafmq_segment_headroom_ids gauge
leafmq_segment_headroom_ids{tag="web"} 1.046576e+06
`
	got := scrape(t, c)
	if strings.Contains(got, `leafmq_requests_total{endpoint="worker-errors"}`) {
		t.Errorf("the worker errors' requests counted twice:\n%s", got)
	}
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("no %q in the scrape:\n%s", line, got)
		}
	}
}

// A Sources without any field (a node that runs nothing yet) is scraped
// without a series and without a panic.
func TestCollectorEmptySources(t *testing.T) {
	if got := scrape(t, metrics.NewCollector(metrics.Sources{})); strings.Contains(got, "leafmq_") {
		t.Fatalf("series from empty Sources:\n%s", got)
	}
}

// scrape registers cs and returns what /metrics answers, in the text
// format.
func scrape(t testing.TB, cs ...prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	return gather(t, reg)
}

// gather returns what /metrics answers for reg, in the text format.
func gather(t testing.TB, reg *prometheus.Registry) string {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(w.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
