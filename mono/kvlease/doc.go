// Package kvlease keeps the leases of monotonic tags (mono.Lease) in a
// JetStream KV bucket, leaf_mono by default: one key per tag holding the
// leader's name, written with a per-key TTL (the bucket's LimitMarkerTTL)
// so that a leader that stops renewing loses the tag after TTL, counted by
// the server from its last write. Every renewal and release is a
// compare-and-swap on the revision the holder wrote last, so a holder that
// lost the key can neither renew nor delete it. It passes mono/leasetest.
//
// A key freed by anything but its holder's Release (a delete marker with
// the headers Leaf-Released and Leaf-Released-Rev naming the holder and
// the revision right before it) may still be served by its holder until
// its fence passes. Markers in the bucket prove nothing: the server's TTL
// marker, a delete or a purge look the same whether the server or an
// operator wrote them. So every Lease follows the bucket's stream from the
// moment it opens (an ordered consumer; a gap in the stream's sequence
// starts the run again) and notes on its monotonic clock when the last
// record of each key arrived. Acquire of a key not released returns a
// Grant whose Wait ends one TTL after that arrival — after the start of
// the run if the key had no record in it, a whole TTL if the watch has not
// seen the key's last message, or the bucket was made again — and the new
// leader serves (and reserves) nothing before it. A key that expired is
// taken at once: its marker comes a TTL after its last record.
//
// It stands beside segment/kvstore and snowflake/kvworker, on internal/jskv.
package kvlease
