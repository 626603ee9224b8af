// Package producer keeps ids ready: one lock-free ring (ringbuf) per
// (engine, tag), pre-filled from the segment engine and refilled in the
// background below the ring's padding threshold, as UidGenerator's
// CachedUidGenerator does.
//
// Memory follows traffic, not the number of tags: a ring starts small
// (Config.MinRing) and is replaced by one four times larger whenever it is
// drained faster than Config.GrowAfter between refills, up to Config.MaxRing.
// Ids left in a replaced ring move to the new one where they fit; any that do
// not are dropped (a gap, never a duplicate).
//
// Take never blocks on the store while the ring has ids; when a request needs
// more ids than the ring holds, the rest come straight from the engine, which
// waits at most its ReadyWait. A caller gets all the ids it asked for or an
// error; ids taken for a request that then fails are lost (a gap).
//
// A Producer is safe for concurrent use.
package producer
