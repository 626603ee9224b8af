package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// histogram records latencies in nanoseconds in an HdrHistogram with three
// significant decimal digits (relative error under 0.1%) from 1 ns to an
// hour; longer values count as an hour. Recording is allocation-free and
// O(1) once the first value has allocated the counts; it is not safe for
// concurrent use (each worker owns one and the runner merges them when the
// workers are done). The zero value is empty and ready.
type histogram struct {
	h *hdrhistogram.Histogram
}

const histMax = int64(time.Hour)

func (h *histogram) init() {
	if h.h == nil {
		h.h = hdrhistogram.New(1, histMax, 3)
	}
}

func (h *histogram) record(d time.Duration) {
	h.init()
	_ = h.h.RecordValue(min(max(int64(d), 0), histMax)) // in range: cannot fail
}

func (h *histogram) merge(o *histogram) {
	if o.h == nil {
		return
	}
	h.init()
	h.h.Merge(o.h)
}

// n is the number of values recorded.
func (h *histogram) n() int64 {
	if h.h == nil {
		return 0
	}
	return h.h.TotalCount()
}

// min and max are the smallest and largest values recorded (0 if none),
// within the histogram's precision.
func (h *histogram) min() time.Duration {
	if h.n() == 0 {
		return 0
	}
	return time.Duration(h.h.Min())
}

func (h *histogram) max() time.Duration {
	if h.n() == 0 {
		return 0
	}
	return time.Duration(h.h.Max())
}

// quantile returns the value at quantile q (0 < q <= 1), within 0.1%.
// Empty: 0.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n() == 0 {
		return 0
	}
	return time.Duration(h.h.ValueAtQuantile(q * 100))
}
