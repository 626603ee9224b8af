// Package kvworker is the embedded default snowflake.Registry: worker ids
// and their time leases in a JetStream KV bucket, so a leafd cluster that
// already runs NATS needs no ZooKeeper or database for its workers.
//
// # Keys
//
// The bucket (default "leaf_workers", or "leaf_workers_<region>" for
// Options.Region: each region leases its workers from a bucket of its own;
// history 1, created with
// LimitMarkerTTL so keys can carry their own TTL) holds two keys per worker
// id N:
//
//	w<N>  the claim: {"node", "lease", "updated"} (unix ms), with a per-key
//	      TTL (Options.TTL, default 10s). Whoever created it holds N.
//	t<N>  the lease: {"lease", "node", "updated", "owner"}, the highest time
//	      lease ever recorded for N, and the token of the registration that
//	      holds N. It has no TTL and its lease is never lowered.
//
// Register scans the ids from a random start (so starting nodes rarely try
// the same id) and claims the first free one with kv.Create(w<N>, …,
// jetstream.KeyTTL(TTL)): Create succeeds only if the key is absent,
// deleted or expired, so two nodes cannot hold one id. It then fences out
// every earlier holder of N: it writes a new random owner token into t<N>
// by compare-and-swap on the revision it read (keeping the lease), and
// returns the lease it replaced as Registration.LastLease. With every id
// claimed it fails with snowflake.ErrNoWorker.
//
// A goroutine keeps the claim alive: every Options.Refresh (default TTL/5)
// it publishes the claim again to $KV.<bucket>.w<N> with
// WithExpectLastSequencePerSubject (the revision it wrote last) and
// WithMsgTTL(TTL) — kv.Update would drop the TTL. A refresh that fails is
// tried again after Refresh/8 (a stream electing a new leader answers
// nothing for a few seconds). If no refresh landed by a quarter of Refresh
// before the claim expires, or the claim changed under it, the Registry
// closes Lost before another node can take the id: the node must stop
// issuing ids then. Close stops that goroutine, waits
// for it, and purges w<N> so the id is free at once; t<N> stays.
//
// Held (snowflake.HeldCounter) counts the claim keys w<N> that exist: the
// ids a Register would find taken now.
//
// # Fencing
//
// A process frozen (SIGSTOP, a VM pause) past the TTL wakes believing it
// still holds N, and its refresher has not run: the claim key alone cannot
// stop it. t<N> does. Every Lease succeeds only while t<N> carries this
// registration's token — a Lease of a lower time too, which then only
// confirms the claim: it swaps t<N> on the revision of this registration's
// last answered write (a success proves no one wrote it since), or, with
// none known or on a conflict or a lost answer, reads t<N> from the stream
// leader and swaps on the revision that carried the token. Once another
// node's Register has replaced the token, the old registration's Lease
// fails with an error wrapping snowflake.ErrNotRegistered and closes Lost;
// whatever it leased before that is in the new holder's LastLease, so the
// new holder's ids all come after the old one's. The Registry implements
// snowflake.ClaimTTLer with Options.TTL, so a snowflake.Source also stops on
// its own monotonic clock once TTL has passed since its last confirmed
// Lease, even before that Lease is tried.
//
// t<N> is never deleted by leafmq. If an operator deletes or purges it,
// what N issued is unknown: the holder's next Lease is refused (it closes
// Lost), and Register skips N (its error, when no other id is left, names
// the key). Putting the key back with a lease past every id N issued,
// {"lease": <unix ms>}, makes N usable again from that lease. A bucket
// deleted and made again is outside what this detects.
//
// # Why the lease key makes restarts safe
//
// Lease(until) raises t<N> to until with a compare-and-swap (on the
// revision it last wrote, or read from the stream leader) before it
// returns, so once the
// generator uses a time it has durably promised not to go beyond until. The
// claim key expires and is purged, but t<N> is never removed: whichever
// node gets N next — this one after a restart, or another one after a crash
// and TTL expiry — reads t<N> in Register and waits until its clock has
// passed it (Config.LastIssued). A node whose clock is behind the previous
// holder's cannot issue ids that the previous holder already issued.
//
// # Reads and errors
//
// Reads that must see the latest write (t<N> before a CAS on a revision
// not known) go to the stream leader through $JS.API.STREAM.MSG.GET, as in
// segment/kvstore: on an R>1 bucket kv.Get may be answered by a lagging
// follower. A server answers that API only while it sees JetStream's meta
// leader (one for a whole super-cluster); a region cut off from the
// others loses it while its bucket keeps its stream leader. The swap on
// the revision last written needs the stream leader only, so a registered
// worker keeps its lease there.
// Compare-and-swap conflicts (10071, or 10164 on clustered streams) are
// retried within Options.Timeout. JetStream that cannot be reached within
// it gives an error wrapping snowflake.ErrRegistryUnavailable; bad options,
// or an existing bucket without LimitMarkerTTL, ErrInvalid. Within a
// Lease each request waits four write round trips (at least 250 ms, twice
// as long after one that got no answer) before it is sent again: a request
// the stream's old leader took with it is asked again of the new one. The
// write round trip, measured from the writes that got an answer, is also
// what LeaseTime reports (snowflake.LeaseTimer): a Source far from the
// server leases further ahead and gives a renewal longer.
//
// A Registry is safe for concurrent use. Register holds the Registry's
// lock while it talks to the server, so a concurrent Close waits for it
// (at most Options.Timeout).
package kvworker
