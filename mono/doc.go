// Package mono serves strictly increasing ids of a tag: the monotonic
// mode, the need Leaf lists as "strictly increasing" and leaves to
// its future plans (one node per key at a time, the old node's ranges thrown
// away on switch-over).
//
// The promise is linearizable order: if the reply to request A arrived
// before request B was sent, B's id is larger — across nodes, restarts and
// failovers. It holds because:
//
//   - one node at a time serves a tag, by a Lease with a TTL (JetStream KV
//     in mono/kvlease); a Leader serves only while its last confirmed
//     acquire or renewal, measured on its own monotonic clock from when the
//     request was sent, plus TTL minus a margin lies ahead, so an old leader
//     stops before the lease can expire and a new one be granted (the clock
//     is Config.Clock, an internal/clock.Clock: the real one, whose readings
//     carry Go's monotonic clock, unless a test gives a clock.Fake);
//   - a new leader reserves a fresh range from the segment store after it
//     holds the lease (Config.Ranges: a segment.Reserver, above every floor
//     of the tag known, as the segment engine reserves), so every id it
//     serves is above every range the old leader could have served from
//     (the store's ranges only go up);
//   - within a leader, ids are taken in order from its ranges; a range
//     reserved under an earlier grant is thrown away.
//
// Gaps are allowed (the rest of a range on failover); order and uniqueness
// are not negotiable. While no node leads a tag, requests find no
// responder and the client retries within its deadline.
//
// A node runs one Server (StartServer): a Leader for every monotonic tag
// of its store, each answered (ServerConfig.Serve) only while it leads,
// and the balance of leadership across the live nodes. The Server knows
// nothing of NATS or of the node's peers: the node passes them in as
// funcs (the announcements of new tags, the live nodes, the peers' floors
// and modes) and the Lease (mono/kvlease).
//
// Leader and Server are safe for concurrent use.
package mono
