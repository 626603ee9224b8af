package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// leafdMetrics are the metric families leafd exports (without "leafmq_"),
// from metrics/collector.go and metrics/live.go. Dashboards and alerts may
// name only these; keep the list in step with packages metrics and node
// (TestMetricListMatchesNode checks that direction).
var leafdMetrics = []string{
	// metrics/buildinfo.go
	"build_info",
	// metrics/collector.go
	"requests_total",
	"request_errors_total",
	"request_processing_seconds_total",
	"worker_request_errors_total",
	"ring_ids",
	"ring_capacity",
	"ring_takes_total",
	"ring_rejected_takes_total",
	"ring_rejected_puts_total",
	"ring_refills_total",
	"segment_tags",
	"segment_loads_total",
	"segment_step",
	"segment_ids_ready",
	"segment_headroom_ids", // label tag
	"snowflake_state",
	"snowflake_worker",
	"snowflake_lease_until_timestamp_seconds",
	"snowflake_state_changes_total",
	"snowflake_layout_remaining_seconds",
	"snowflake_ring_ids",
	"snowflake_ring_capacity",
	"snowflake_ring_takes_total",
	"snowflake_ring_dropped_total",
	"snowflake_peer_clock_offset_seconds",
	"snowflake_worker_ids_free",     // label region
	"snowflake_worker_ids_capacity", // label region
	"events_published_total",        // label kind
	"events_suppressed_total",       // label kind
	"ring_fill_ratio",               // label tag
	"pool_batches",                  // label subject
	"pool_refused_ids_total",
	"subject_serving",       // label subject
	"subject_ready",         // label subject
	"probes_answered_total", // label subject
	"probe_requests_total",  // labels subject, result
	"segment_tag_refused",   // label tag
	"nats_rtt_seconds",
	// metrics/live.go
	"request_duration_seconds", // histogram, label engine
	"id_requests_total",        // labels engine, code
	"ids_issued_total",         // label engine=segment|snowflake
	"segment_ids_issued_total", // label tag
	"segment_load_seconds",     // histogram
	"segment_store_errors_total",
}

// histograms are the families with _bucket, _sum and _count series.
var histograms = []string{"request_duration_seconds", "segment_load_seconds"}

var metricRE = regexp.MustCompile(`leafmq_[a-z0-9_]+`)

// metricsIn returns the leafmq_ metric families named in text, each once,
// with histogram suffixes removed.
func metricsIn(text string) []string {
	var out []string
	for _, m := range metricRE.FindAllString(text, -1) {
		name := strings.TrimPrefix(m, "leafmq_")
		for _, h := range histograms {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if name == h+suffix {
					name = h
				}
			}
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// unknownMetrics returns the families named in text that leafd does not export.
func unknownMetrics(text string) []string {
	var bad []string
	for _, m := range metricsIn(text) {
		if !slices.Contains(leafdMetrics, m) {
			bad = append(bad, "leafmq_"+m)
		}
	}
	return bad
}

// Every metric packages metrics and node define is in leafdMetrics, so
// dashboards and alerts are checked against what leafd really exports.
func TestMetricListMatchesNode(t *testing.T) {
	var files []string
	for _, dir := range []string{"../metrics", "../node"} {
		fs, err := filepath.Glob(dir + "/*.go")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	defRE := regexp.MustCompile(`\bd\("([a-z0-9_]+)"|Name: +"leafmq_([a-z0-9_]+)"`)
	var defs []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range defRE.FindAllStringSubmatch(string(src), -1) {
			defs = append(defs, m[1]+m[2])
		}
	}
	if len(defs) < 25 {
		t.Fatalf("found only %d metric definitions in packages metrics and node: has their shape changed?", len(defs))
	}
	for _, d := range defs {
		if !slices.Contains(leafdMetrics, d) {
			t.Errorf("leafd exports leafmq_%s, which deploy/metrics_test.go's leafdMetrics lacks: add it (and a dashboard panel if it helps)", d)
		}
	}
	for _, m := range leafdMetrics {
		if !slices.Contains(defs, m) {
			t.Errorf("leafdMetrics lists leafmq_%s, which packages metrics and node do not define", m)
		}
	}
}
