package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Report writes results as an aligned table, one row each, then a line per
// result that had errors or duplicates. With exactly two results (leafd
// first, the baseline second) it adds the ratio of their throughputs: the
// share of the bare NATS round-trip rate that leafd reaches.
func Report(w io.Writer, results ...Result) {
	rows := [][]string{{"name", "time", "requests", "ids", "errors", "req/s", "ids/s", "p50", "p90", "p99", "p99.9", "max"}}
	for _, r := range results {
		rows = append(rows, []string{
			r.Name, fmtDur(r.Elapsed), fmt.Sprint(r.Requests), fmt.Sprint(r.IDs), fmt.Sprint(r.Errors),
			fmt.Sprintf("%.0f", r.ReqPerSec), fmt.Sprintf("%.0f", r.IDsPerSec),
			fmtDur(r.P50), fmtDur(r.P90), fmtDur(r.P99), fmtDur(r.P999), fmtDur(r.Max),
		})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		b.Reset()
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 0 { // names align left, numbers right
				b.WriteString(cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	for _, r := range results {
		if len(r.ErrorsByCode) > 0 {
			parts := make([]string, 0, len(r.ErrorsByCode))
			for _, c := range slices.Sorted(maps.Keys(r.ErrorsByCode)) {
				parts = append(parts, fmt.Sprintf("%s=%d", c, r.ErrorsByCode[c]))
			}
			fmt.Fprintf(w, "errors %s: %s\n", r.Name, strings.Join(parts, " "))
		}
		if r.Duplicates > 0 {
			fmt.Fprintf(w, "DUPLICATE IDS %s: %d\n", r.Name, r.Duplicates)
		}
	}
	if len(results) == 2 {
		a, b := results[0], results[1]
		fmt.Fprintf(w, "ratio %s/%s: req/s %s, ids/s %s\n", a.Name, b.Name,
			ratio(a.ReqPerSec, b.ReqPerSec), ratio(a.IDsPerSec, b.IDsPerSec))
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// fmtDur prints a latency with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d)
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + "µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + "ms"
	default:
		return sig3(d.Seconds()) + "s"
	}
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// finite keeps NaN and ±Inf (a hand-made Result) out of JSON.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// resultJSON is Result on the wire: durations in nanoseconds.
type resultJSON struct {
	Name         string           `json:"name"`
	Requests     int64            `json:"requests"`
	IDs          int64            `json:"ids"`
	Errors       int64            `json:"errors"`
	ErrorsByCode map[string]int64 `json:"errors_by_code,omitempty"`
	Duplicates   int64            `json:"duplicates"`
	ElapsedNS    int64            `json:"elapsed_ns"`
	ReqPerSec    float64          `json:"req_per_sec"`
	IDsPerSec    float64          `json:"ids_per_sec"`
	P50NS        int64            `json:"p50_ns"`
	P90NS        int64            `json:"p90_ns"`
	P99NS        int64            `json:"p99_ns"`
	P999NS       int64            `json:"p999_ns"`
	MaxNS        int64            `json:"max_ns"`
}

// JSON returns r as one JSON object with snake_case keys and durations in
// nanoseconds (elapsed_ns, p50_ns, …).
func (r Result) JSON() []byte {
	b, err := json.Marshal(resultJSON{
		Name: r.Name, Requests: r.Requests, IDs: r.IDs, Errors: r.Errors,
		ErrorsByCode: r.ErrorsByCode, Duplicates: r.Duplicates,
		ElapsedNS: int64(r.Elapsed), ReqPerSec: finite(r.ReqPerSec), IDsPerSec: finite(r.IDsPerSec),
		P50NS: int64(r.P50), P90NS: int64(r.P90), P99NS: int64(r.P99), P999NS: int64(r.P999),
		MaxNS: int64(r.Max),
	})
	if err != nil {
		panic("bench: marshal result: " + err.Error()) // only strings and finite numbers: cannot happen
	}
	return b
}
