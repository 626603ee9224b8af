package bench

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear, like HdrHistogram with two significant binary
// digits more than a percent needs: values below 2*subCount are counted
// exactly; above, every power-of-two range [2^e, 2^(e+1)) is cut into
// subCount equal buckets. A bucket is at most 1/subCount of its lower bound
// wide, and a percentile is reported as the bucket's midpoint, so the relative
// error is at most 1/(2*subCount) = 0.39%.
const (
	subBits  = 7
	subCount = 1 << subBits
	nBuckets = (64 - subBits + 1) * subCount // covers every uint64
)

// histogram records latencies in nanoseconds. Recording is allocation-free
// and O(1); it is not safe for concurrent use (each worker owns one and the
// runner merges them when the workers are done).
type histogram struct {
	counts   [nBuckets]uint64
	n        uint64
	min, max uint64
}

func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - (subBits + 1)
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (lo, width uint64) {
	if i < 2*subCount {
		return uint64(i), 1
	}
	shift := uint(i/subCount - 1)
	top := uint64(i%subCount + subCount)
	return top << shift, 1 << shift
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// quantile returns the value at quantile q (0 < q <= 1): the smallest
// recorded value v such that at least q of all values are <= v, within the
// bucket error above, and never outside [min, max]. Empty: 0.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The epsilon keeps 0.999*1000 from rounding up to rank 1000.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketRange(i)
			v := lo + w/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max) // unreachable: the counts add up to n
}
