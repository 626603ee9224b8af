// Package jskv holds what leafmq's JetStream KV backends (segment/kvstore
// and snowflake/kvworker) and the node share: reads through the stream
// leader, and the classification of JetStream errors into conflicts,
// transient failures and an unreachable JetStream.
//
// Why leader reads: a KV bucket allows "direct get", which any replica
// answers (a client's own server's replica first). On an R>1 bucket a
// follower may not have applied the latest committed write yet, so kv.Get
// right after a write can miss it, and ListKeys (an R1 consumer that may sit
// on a follower) can still list a deleted key. STREAM.MSG.GET is answered by
// the stream leader, which has applied every write it acknowledged. Stale
// reads could never cause duplicates (every write is a compare-and-swap on
// the revision read), only spurious "not found" answers and extra conflicts.
//
// DirectBatch is the exception, for reading a whole bucket: batched direct
// gets from any replica, fast, whose end the reader confirms with the
// leader.
//
// Unreplicated tells which of the streams ids depend on hold one replica,
// for the node's warning that one server's disk sync is then all their
// durability.
//
// Everything here is safe for concurrent use.
package jskv
