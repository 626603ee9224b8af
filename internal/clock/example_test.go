package clock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
)

// renew is a loop as the code under test writes it: it takes a Clock and
// renews every period until ctx ends.
func renew(ctx context.Context, c clock.Clock, period time.Duration, renewed chan<- time.Time) {
	t := c.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			renewed <- c.Now()
		}
	}
}

// A test drives the loop with a Fake instead of sleeping: it waits until
// the loop has armed its ticker, then moves the clock.
func Example() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renewed := make(chan time.Time)
	go renew(ctx, c, time.Second, renewed)

	_ = c.BlockUntil(ctx, 1) // the ticker is armed
	for range 3 {
		c.Advance(time.Second)
		fmt.Println("renewed at", c.Since(start), (<-renewed).Sub(start))
	}
	// Output:
	// renewed at 1s 1s
	// renewed at 2s 2s
	// renewed at 3s 3s
}
