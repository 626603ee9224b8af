// Package kvstore is the embedded default segment.Store: Leaf's leaf_alloc
// table kept in a NATS JetStream key-value bucket, advanced by
// compare-and-swap. It needs nothing but the NATS servers leafd already
// talks to (an embedded one by default).
//
// # Layout
//
// One bucket (Options.Bucket, default "leaf_alloc"; history 2, file
// storage, Options.Replicas replicas — 3 on a cluster) holds one key per
// tag. History 2 keeps a row behind the marker of `nats kv del`; buckets
// made by older versions (history 1) work as they are. A tag is [A-Za-z0-9_-]{1,128}, which is always a valid KV key. The
// value is a small JSON object:
//
//	{"max_id":2001,"step":1000,"description":"order ids","update_time":"2025-01-02T03:04:05.123456789Z"}
//
//	max_id       int64, the exclusive end of the last range handed out
//	step         int, 1..2^31-1, the configured step
//	description  string, up to 256 bytes
//	update_time  RFC 3339 UTC time of the last write, as the writer's clock saw it
//
// max_id is a plain JSON number: tools reading it outside Go must parse
// integers above 2^53 exactly. A value that does not decode, or whose step
// or max_id is out of range, is reported as ErrCorrupt and never rewritten.
// `nats kv get leaf_alloc <tag>` shows a row.
//
// A tag's mode (segment.Mode) has a key of its own, mode.<tag>, written
// once by Create before the row and never rewritten by the store, so a
// deleted or purged row does not take the mode with it:
//
//	{"kind":"opaque","width":53,"key_id":"3f1c0a9b2d4e5f60"}
//
// A mono or opaque row also carries a copy ("mode":{...}) so that an
// allocation reports it without a second read; a row without one (a plain
// tag, a row from before modes, one put by hand) takes its mode key's on
// its next write. Tags have no dots, so no mode key is a tag.
//
// # Compare-and-swap, and why no range is handed out twice
//
// Every write (Advance, SetStep, SetMaxID, Create,
// Delete, Restart) is a read-modify-write on one key:
//
//  1. read the key's latest message and its revision (stream sequence);
//  2. compute the new row (max_id += step, ...);
//  3. publish it with Nats-Expected-Last-Subject-Sequence = that revision
//     (kv.Update; for Delete a purge marker carrying the row, published
//     with the same header; revision 0, "no message yet", for Create; the
//     marker's revision for Restart of a deleted tag).
//
// The stream leader applies a publish only if the key's last sequence is
// still the one read, and acknowledges it only once a quorum of replicas
// has stored it. So of two writers that read the same revision exactly one
// wins; the loser gets "wrong last sequence" (error code 10071, or 10164 on
// a replicated stream — both are tested) and starts over from step 1 after
// a short jittered pause. An Advance returns its range only after its own write
// was acknowledged: the range [max_id-step, max_id) is then recorded as
// taken on a quorum, and every later writer reads a max_id at or above its
// end. This holds across nodes, processes and restarts, whichever server a
// store is connected to.
//
// A write whose acknowledgement is lost (timeout, connection loss, leader
// change) returns segment.ErrUnavailable: it may or may not have been
// applied. Retrying re-reads the row, so the worst case is a gap of one
// step, never an overlap.
//
// # Reads
//
// Reads use the stream leader's STREAM.MSG.GET API, not kv.Get: KV buckets
// allow "direct get", answered by any replica (the local one first), and a
// follower may lag the write just acknowledged. Stale reads would not break
// uniqueness (the CAS rejects them) but would make Get and Advance report a
// just-created tag as unknown.
//
// Tags and Modes walk the bucket's messages in sequence order, in batched
// direct gets of 1,000 messages that any replica answers, and ask the
// leader for the message after the last one seen before they end: where a
// lagging follower stopped short, the leader's answer is read and the
// batches go on from it. So every write acknowledged before the walk
// started is seen (or a later revision of its key is), as with the leader
// alone, at a batch's cost per thousand messages instead of a round trip
// per message. The walk is not a snapshot: each key reads as it was when
// the walk passed it. A stream that does not allow direct gets, or a
// server without batched ones, is walked through the leader one message at
// a time. An R1 ordered consumer (what ListKeys uses) is not used: it may
// be placed on a lagging follower, with nothing to confirm its end.
//
// # Deleted tags
//
// A delete or purge marker is history, not absence. Delete purges the key
// with a marker that carries the row as its body; `nats kv del` leaves a
// bare delete marker (with, on a history-2 bucket, the last row behind it);
// `nats kv purge` leaves a bare purge marker. In every case Get and Advance see
// no row (ErrUnknownTag) and Tags omits the key, but Create — and so the
// engine's auto-create — refuses it with segment.ErrTagDeleted: the tag
// would start again at 1 and repeat its ids. Restart writes over the marker
// by CAS, and refuses a floor below the highest max_id it finds in the
// marker's body or the revisions behind it. After a bare `nats kv purge`
// (or `nats kv del` on a history-1 bucket) nothing is left to check the
// floor against: it is the operator's, and every node that served the tag
// still refuses ranges below its own floor (segment.Config.Floors).
//
// A max_id lowered by hand (`nats kv put leaf_alloc TAG '{"max_id":1,...}'`)
// is seen the same way: Advance also reads the revisions the bucket
// keeps behind the latest (one more request to the stream leader per
// allocation), and refuse, changing nothing, while one of them has a higher
// max_id (segment.ErrBelowFloor); Restart clears it. A history-1 bucket, or
// two puts in a row, leave nothing behind to compare with: the node floors
// remain.
//
// What the bucket cannot remember: markers removed by compaction
// (PurgeDeletes, `nats kv compact`, a MaxAge), or the whole bucket deleted
// and made again. For the latter the store's Incarnation (the name and the
// stream's creation time, which the servers keep for the stream's life)
// changes, and every node that served from the old bucket refuses
// auto-create until an operator acts (see package segment).
//
// With regions the bucket records the region it serves under the key
// leafmq.region (segment.RegionMarker): a key with a dot, which no tag can
// be and which Tags and Modes pass over.
//
// # Errors and time limits
//
// Every call, its retries included, is bounded by Options.Timeout (default
// 3s) and by the caller's context. Tags and Modes are the exception: the
// timeout bounds each step of their walk (a batch, or one request to the
// leader with its retries), so a big bucket never fails them by its size
// alone; only the caller's context bounds the whole walk. No answer within the timeout, no
// responders, a closed or reconnecting connection, JetStream not enabled or
// the bucket missing: an error wrapping segment.ErrUnavailable (and the NATS
// error). The caller's context ending: an error wrapping ctx.Err(). Brief
// outages such as a stream leader election are retried inside the timeout.
//
// A Store is safe for concurrent use. It does not own the NATS connection
// unless Options.CloseConn is set; it starts no goroutines.
package kvstore
