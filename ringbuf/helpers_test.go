package ringbuf

import (
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
)

// newRing returns a ring of cfg that is closed when the test ends.
func newRing[T any](tb testing.TB, cfg Config[T]) *Ring[T] {
	tb.Helper()
	r, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

// waitFor polls cond until it holds, failing tb after a generous deadline.
// It is for conditions an asynchronous goroutine makes true; it never
// sleeps to prove that something did not happen.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	testenv.Eventually(tb, what, 10*time.Second, cond)
}

// mustTake takes one value or fails tb.
func mustTake[T any](tb testing.TB, r *Ring[T]) T {
	tb.Helper()
	v, err := r.Take()
	if err != nil {
		tb.Fatalf("Take: %v", err)
	}
	return v
}
