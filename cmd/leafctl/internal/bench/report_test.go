package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func sampleResults() []Result {
	return []Result{
		{
			Name: "leaf.segment.bench", Requests: 412000, IDs: 412000, Errors: 3,
			ErrorsByCode: map[string]int64{"503": 2, "timeout": 1}, Elapsed: 10 * time.Second,
			ReqPerSec: 41199.7, IDsPerSec: 41199.7,
			P50: 182 * time.Microsecond, P90: 251 * time.Microsecond, P99: 604 * time.Microsecond,
			P999: 1480 * time.Microsecond, Max: 12 * time.Millisecond,
		},
		{
			Name: "echo baseline", Requests: 598000, IDs: 598000, Elapsed: 10 * time.Second,
			ReqPerSec: 59800, IDsPerSec: 59800,
			P50: 128 * time.Microsecond, P90: 173 * time.Microsecond, P99: 402 * time.Microsecond,
			P999: 1030 * time.Microsecond, Max: 9 * time.Millisecond,
		},
	}
}

func TestReport(t *testing.T) {
	var out bytes.Buffer
	Report(&out, sampleResults()...)
	s := out.String()
	t.Logf("\n%s", s)
	for _, want := range []string{
		"ratio leaf.segment.bench/echo baseline: req/s 0.69, ids/s 0.69\n",
		"errors leaf.segment.bench: 503=2 timeout=1\n",
		"182µs", "1.48ms", "12.0ms", "41200",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	lines := strings.Split(s, "\n")
	if n := utf8.RuneCountInString; n(lines[0]) != n(lines[1]) || n(lines[1]) != n(lines[2]) {
		t.Errorf("table rows not aligned:\n%s", s)
	}

	out.Reset()
	Report(&out, sampleResults()[0])
	if strings.Contains(out.String(), "ratio") {
		t.Errorf("ratio line with one result:\n%s", out.String())
	}
	out.Reset()
	zero := sampleResults()
	zero[1].ReqPerSec, zero[1].IDsPerSec = 0, 0
	Report(&out, zero...)
	if !strings.Contains(out.String(), "req/s n/a") {
		t.Errorf("division by a zero baseline:\n%s", out.String())
	}
}

func TestResultJSON(t *testing.T) {
	r := sampleResults()[0]
	var got map[string]any
	if err := json.Unmarshal(r.JSON(), &got); err != nil {
		t.Fatal(err)
	}
	if got["name"] != r.Name || got["p999_ns"] != float64(r.P999) || got["req_per_sec"] != r.ReqPerSec ||
		got["errors_by_code"].(map[string]any)["503"] != 2.0 {
		t.Errorf("JSON %s", r.JSON())
	}
	r.ReqPerSec = math.NaN()
	if err := json.Unmarshal(r.JSON(), &got); err != nil || got["req_per_sec"] != 0.0 {
		t.Errorf("NaN rate: %v %s", err, r.JSON())
	}
}

func ExampleReport() {
	Report(os.Stdout, sampleResults()...)
	// Output:
	// name                 time  requests     ids  errors  req/s  ids/s    p50    p90    p99   p99.9     max
	// leaf.segment.bench  10.0s    412000  412000       3  41200  41200  182µs  251µs  604µs  1.48ms  12.0ms
	// echo baseline       10.0s    598000  598000       0  59800  59800  128µs  173µs  402µs  1.03ms  9.00ms
	// errors leaf.segment.bench: 503=2 timeout=1
	// ratio leaf.segment.bench/echo baseline: req/s 0.69, ids/s 0.69
}
