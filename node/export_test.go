package node

import "time"

// SetMonoBalanceEvery sets how often nodes rebalance monotonic tags, for
// tests that start nodes after it; it returns the restore.
func SetMonoBalanceEvery(d time.Duration) func() {
	old := monoBalanceEvery
	monoBalanceEvery = d
	return func() { monoBalanceEvery = old }
}

// TakeSnowflake takes len(dst) ids from the node's snowflake ring, the
// ring its responder answers leaf.snowflake from, without asking NATS
// (where another node may answer).
func (n *Node) TakeSnowflake(dst []int64) int { return n.sf.ring.Try(dst) }
