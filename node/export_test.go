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
func (n *Node) TakeSnowflake(dst []int64) int { return n.serve.sf.Ring().Try(dst) }

// SetProbeEvery sets how often nodes started after it probe the subjects
// they serve; it returns the restore.
func SetProbeEvery(d time.Duration) func() {
	old := probeEvery
	probeEvery = d
	return func() { probeEvery = old }
}

// StopSegmentService stops the node's segment micro service behind its
// back: its subscriptions are gone, while the node still says it serves
// segment ids, as after a subscription the server dropped.
func (n *Node) StopSegmentService() error { return n.serve.resp.SegmentService().Stop() }

// PeerFloor is the highest floor of tag the node heard from its peers.
func (n *Node) PeerFloor(tag string) int64 { f, _ := n.peers.Floor(tag); return f }

// NATSConnected reports whether the node's connection to NATS is up.
func (n *Node) NATSConnected() bool { return n.conn.NC().IsConnected() }

// SetWorkerCountEvery sets how often nodes started after it count their
// region's held worker ids; it returns the restore.
func SetWorkerCountEvery(d time.Duration) func() {
	old := workerCountEvery
	workerCountEvery = d
	return func() { workerCountEvery = old }
}
