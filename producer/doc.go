// Package producer keeps ids ready: one lock-free ring (ringbuf) per
// (engine, tag), pre-filled from the segment engine and refilled in the
// background below the ring's padding threshold, as UidGenerator's
// CachedUidGenerator does.
//
// Memory follows traffic, not the number of tags: a ring starts small
// (Config.MinRing) and is replaced by one four times larger whenever it is
// drained faster than Config.GrowAfter between refills, up to Config.MaxRing.
// Ids left in a replaced ring move to the new one where they fit; any that do
// not are dropped (a gap, never a duplicate). Rings of tags that the engine
// has dropped (deleted from the store) are freed every Config.PruneInterval.
//
// Single ids and small batches (up to Config.DirectOver) come from the ring;
// larger batches come straight from the segment engine's double buffer as
// consecutive runs (one atomic add per run), which is cheaper than moving
// thousands of ids through ring slots. Neither waits for the store while the
// buffers have ids; when a request needs more ids than the ring holds, the
// rest come from the engine, which waits at most its ReadyWait. A caller gets all the ids it asked for or an
// error; ids taken for a request that then fails are lost (a gap).
//
// Small requests see a tag's ids in the engine's order: a refill holds the
// tag's order lock (ringbuf.Config.FillLock) from drawing ids to putting
// them, and a small request that finds the ring short takes that lock,
// takes what the refill put, and only then draws from the engine. So a
// client that asks again after each reply gets increasing ids from one
// node. A large batch does not wait for the lock: its run can come ahead
// of ids the ring still holds.
//
// Snowflake is the snowflake engine's ring: pre-filled from a
// snowflake.Source a whole tick at a time (borrowing future ticks up to the
// persisted lease under load), refilled below its padding threshold, with ids
// idle for longer than SnowflakeConfig.MaxAge thrown away so an id's time
// stays close to when it is handed out.
//
// A Producer and a Snowflake are safe for concurrent use.
package producer
