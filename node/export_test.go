package node

import "time"

// SetMonoBalanceEvery sets how often nodes rebalance monotonic tags, for
// tests that start nodes after it; it returns the restore.
func SetMonoBalanceEvery(d time.Duration) func() {
	old := monoBalanceEvery
	monoBalanceEvery = d
	return func() { monoBalanceEvery = old }
}
