package metrics_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/metrics"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
)

// An HTTP id request counts in the same series as a NATS one, and under
// endpoint http-<engine> of the collector; a mono request over HTTP counts
// only as an HTTP request (the tag's leader counts its ids).
func TestLiveCountsNATSAndHTTP(t *testing.T) {
	m := metrics.NewLive()
	m.Observe(responder.Observation{Engine: "segment", Tag: "web", Code: "200", IDs: 3, Took: time.Millisecond})
	m.Observe(responder.Observation{Engine: "snowflake", Code: "503", Took: time.Millisecond})
	m.ObserveHTTP(httpapi.Observation{Engine: "segment", Tag: "web", Code: 200, IDs: 2, Took: time.Millisecond})
	m.ObserveHTTP(httpapi.Observation{Engine: "segment", Tag: "web", Code: 400, Took: time.Millisecond})
	m.ObserveHTTP(httpapi.Observation{Engine: "mono", Tag: "seq", Code: 200, IDs: 5, Took: time.Millisecond})
	m.ObserveLoad(segment.LoadEvent{Tag: "web", Took: time.Millisecond})
	m.ObserveLoad(segment.LoadEvent{Tag: "web", Took: time.Millisecond, Err: errors.New("store away")})
	got := live(t, m) + scrape(t, metrics.NewCollector(metrics.Sources{HTTP: m}))
	for _, line := range []string{
		`leafmq_ids_issued_total{engine="segment"} 5`,
		`leafmq_segment_ids_issued_total{tag="web"} 5`,
		`leafmq_id_requests_total{code="200",engine="segment"} 2`,
		`leafmq_id_requests_total{code="400",engine="segment"} 1`,
		`leafmq_id_requests_total{code="503",engine="snowflake"} 1`,
		`leafmq_request_duration_seconds_count{engine="segment"} 3`,
		`leafmq_segment_load_seconds_count 2`,
		`leafmq_segment_store_errors_total 1`,
		`leafmq_requests_total{endpoint="http-segment"} 2`,
		`leafmq_request_errors_total{endpoint="http-segment"} 1`,
		`leafmq_requests_total{endpoint="http-mono"} 1`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("no %q in the scrape:\n%s", line, got)
		}
	}
	if strings.Contains(got, `engine="mono"`) {
		t.Errorf("a mono request over HTTP counted as an id request here:\n%s", got)
	}
}

// Past MaxTagSeries tags, segment ids count under tag "_other".
func TestLiveTagSeriesCapped(t *testing.T) {
	m := metrics.NewLive()
	for i := range metrics.MaxTagSeries + 2 {
		m.Observe(responder.Observation{Engine: "segment", Tag: fmt.Sprintf("t%d", i), Code: "200", IDs: 1})
	}
	got := live(t, m)
	if n := strings.Count(got, "leafmq_segment_ids_issued_total{"); n != metrics.MaxTagSeries+1 {
		t.Errorf("%d series of leafmq_segment_ids_issued_total, want %d", n, metrics.MaxTagSeries+1)
	}
	if !strings.Contains(got, `leafmq_segment_ids_issued_total{tag="_other"} 2`+"\n") {
		t.Errorf("the tags past the cap are not counted as _other")
	}
}

// live returns what /metrics answers for m alone.
func live(t testing.TB, m *metrics.Live) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m.Register(reg)
	return gather(t, reg)
}
