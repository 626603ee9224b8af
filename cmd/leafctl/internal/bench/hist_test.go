package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramKnownValues(t *testing.T) {
	var h histogram
	for i := 1; i <= 10000; i++ { // 1µs .. 10ms, once each
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 5 * time.Millisecond},
		{0.9, 9 * time.Millisecond},
		{0.99, 9900 * time.Microsecond},
		{0.999, 9990 * time.Microsecond},
		{1, 10 * time.Millisecond},
	} {
		got := h.quantile(tc.q)
		if rel := math.Abs(float64(got-tc.want)) / float64(tc.want); rel > 0.01 {
			t.Errorf("q%v = %v, want %v (±1%%), off by %.2f%%", tc.q, got, tc.want, 100*rel)
		}
	}
	if rel(h.max(), 10*time.Millisecond) > 0.001 || h.min() != time.Microsecond || h.n() != 10000 {
		t.Errorf("min %v max %v n %d", h.min(), h.max(), h.n())
	}
}

func TestHistogramSmallValuesExact(t *testing.T) {
	var h histogram
	for i := 1; i <= 100; i++ {
		h.record(time.Duration(i))
	}
	if got := h.quantile(0.5); got != 50 {
		t.Errorf("p50 = %v, want 50ns", got)
	}
	if got := h.quantile(0.99); got != 99 {
		t.Errorf("p99 = %v, want 99ns", got)
	}
	var empty histogram
	if got := empty.quantile(0.99); got != 0 {
		t.Errorf("empty p99 = %v", got)
	}
	h.record(-5) // a clock oddity is a zero, not a panic
	if h.min() != 0 {
		t.Errorf("min %v after a negative value", h.min())
	}
}

// TestHistogramAgainstSort compares with exact percentiles of log-normal
// latencies spread over five orders of magnitude, recorded into several
// histograms and merged as the runner does.
func TestHistogramAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := make([]histogram, 4)
	var all []int64
	for i := range 200000 {
		v := int64(math.Exp(rng.NormFloat64()*2+11)) + 1 // ~60µs median, long tail
		all = append(all, v)
		parts[i%len(parts)].record(time.Duration(v))
	}
	var h histogram
	for i := range parts {
		h.merge(&parts[i])
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 0.9999} {
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		got := h.quantile(q)
		if rel := math.Abs(float64(got)-float64(want)) / float64(want); rel > 0.002 {
			t.Errorf("q%v = %d, exact %d, off by %.3f%%", q, got, want, 100*rel)
		}
	}
	if rel(h.max(), time.Duration(all[len(all)-1])) > 0.001 || h.n() != int64(len(all)) {
		t.Errorf("max %v (want %d) n %d", h.max(), all[len(all)-1], h.n())
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h histogram
	for i := range b.N {
		h.record(time.Duration(i & 0xfffff))
	}
}

func rel(got, want time.Duration) float64 {
	return math.Abs(float64(got-want)) / float64(want)
}
