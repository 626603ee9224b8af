// Package kvlease keeps the leases of monotonic tags (mono.Lease) in a
// JetStream KV bucket, leaf_mono by default: one key per tag holding the
// leader's name, written with a per-key TTL (the bucket's LimitMarkerTTL)
// so that a leader that stops renewing loses the tag after TTL, counted by
// the server from its last write. Every renewal and release is a
// compare-and-swap on the revision the holder wrote last, so a holder that
// lost the key can neither renew nor delete it. It passes mono/leasetest.
//
// A key freed by anyone but its holder — an operator's `nats kv del
// leaf_mono <tag>` or purge, rather than the holder's Release (a delete
// marker with the header Leaf-Released) or the server's TTL expiry (a
// marker with Nats-Marker-Reason) — may still be served by its holder
// until its fence passes: the next Acquire then returns a Grant with Wait
// = TTL, and the new leader serves (and reserves) nothing before it. A key
// with no message at all is treated the same way: it may be new, or its
// history may have been erased under a live holder (its markers purged,
// the bucket made again), and the bucket cannot tell which. So a new
// monotonic tag serves its first id one TTL after its first acquire.
//
// It stands beside segment/kvstore and snowflake/kvlease, on internal/jskv.
//
// The room: floor 3 of the README's Layout; it imports internal/jskv, mono,
// segment, the standard library and outside modules. No package it imports
// stands on its floor or above (farm-studio look: no arrow runs up).
package kvlease
