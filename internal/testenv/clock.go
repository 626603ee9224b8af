package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
)

// Armed waits until n timers of c are armed: the code under test waits on
// the clock, and the test may move it.
func Armed(tb testing.TB, c *clock.Fake, n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.BlockUntil(ctx, n); err != nil {
		tb.Fatalf("%d of %d timers armed within 10s", c.Timers(), n)
	}
}
