// Package pool is leafmq's JetStream batch pool: ready-made batches of ids
// in a work-queue stream (LEAF_POOL), one subject per pool
// (leaf.pool.segment.<tag>, leaf.pool.snowflake), that clients fetch
// without asking a leafd — so they keep getting ids for a while even when
// every leafd is briefly down. In a deployment of regions each region has
// a pool of its own (LEAF_POOL_<region>, leaf.in.<region>.pool.…: StreamIn,
// PrefixIn), placed in its cluster and filled by its nodes only, so a
// region cut off from the others keeps its pool topped up and its clients
// read it without crossing a gateway.
//
// Single use is the whole point, and JetStream's acks alone do not give it
// (a batch redelivered after AckWait can be acked twice, and a server that
// crashes before it flushes its consumer state — written asynchronously —
// delivers a batch again as a first delivery and confirms both acks). Here:
//   - each pool has one durable pull consumer with explicit acks and
//     MaxDeliver 1, so a running server never delivers a batch twice;
//   - a client uses a batch only if its metadata says first delivery and
//     it then deletes the batch from the stream by sequence (Take): a
//     delete succeeds once, and is in the stream's store (fsynced with
//     sync_always, committed by the replicas of an R3 stream) before the
//     server confirms it, so exactly one client wins across any crash;
//   - a batch fetched and never acked (a client that died) is deleted by the
//     nodes when the max-deliveries advisory names it, so it cannot linger
//     and no one else can ever get it.
//
// Nodes run a Filler that tops each pool up from their rings to Depth
// batches. The stream refuses publishes beyond Depth per subject
// (DiscardNew per subject), so the bound holds however many nodes fill at
// once; ids of a refused batch are a gap.
package pool
