package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds and fails tb if it does not within
// the given time: a bound on a hang, never a timing assertion. It is for
// conditions that another goroutine makes true; it never sleeps to show
// that something did not happen. Polling starts at 100µs and backs off to
// 5ms, so fast conditions are seen fast without spinning on slow ones.
func Eventually(tb testing.TB, what string, within time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	pause := 100 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}
