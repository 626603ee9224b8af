// Package clock is leafmq's one seam for time: the reading of the clock
// (Now, Since, Until) and the timers and tickers that drive the loops
// (lease renewal, refills, step adaptation, retries, expiry).
//
// Code that needs time takes a Clock, usually as a field of its Config or
// Options; a nil Clock means Real (clock.Or). Real is the machine's clock:
// its Now is time.Now, whose readings carry Go's monotonic clock, so
// leases and TTLs measured with Since on its readings are immune to steps
// of the wall clock, exactly as with time.Since. A Fake is a clock that
// moves only when a test moves it: Advance fires the timers and tickers
// that come due, in order, each sending its own time, so a test of a loop
// steps through it without sleeping. BlockUntil waits until the code
// under test has armed its timers, so a test never advances a clock
// nobody is waiting on yet.
//
// Timers and tickers follow the semantics of Go 1.23's time.Timer: after
// Stop returns, no stale value is received from C. Only what leafmq's code
// uses is here (no Reset, no AfterFunc).
package clock
