// Package snowflake is the snowflake id engine: the bit Layout of an id
// (Meituan Leaf-snowflake's by default, Baidu UidGenerator's as a preset, or
// any other), the Generator that issues the ids of one worker, guarding
// against a clock that moves backwards, the Registry of worker ids and the
// Source that ties them together with a persisted time lease.
//
// # Layout
//
// An id is a positive int64: a zero sign bit, the time since the layout's
// epoch in ticks of TimeUnit, the worker id and the sequence within the tick.
// Leaf's layout (LeafLayout, the zero Layout):
//
//	+--------------------------------------------------------------------------+
//	| 1 bit unused | 41 bits time (ms) | 10 bits worker id | 12 bits sequence  |
//	+--------------------------------------------------------------------------+
//
// 4096 ids per ms per worker, 1024 workers, time since the Twitter epoch
// 2010-11-04T01:42:54.657Z until 2080. Layout.Decompose gives what Leaf's
// /decodeSnowflakeId does: timestamp = (id>>22)+twepoch,
// workerId = (id>>12)&1023, sequence = id&4095.
//
// UidGenerator's default (UidGenLayout):
//
//	+--------------------------------------------------------------------------+
//	| 1 bit unused | 28 bits time (s)  | 22 bits worker id | 13 bits sequence  |
//	+--------------------------------------------------------------------------+
//
// 8192 ids per s per worker, 4M disposable worker ids, but 28 bits of seconds
// last only 8.5 years: from UidGenerator's default epoch 2016-05-20 they ran
// out on 2024-11-20 (Layout.Expires, Layout.Remaining).
//
// # Generator
//
// A Generator issues the ids of one worker. Within a tick the sequence
// counts up from a random start below Config.RandomStart (as Leaf does); when
// it is used up the Generator waits for the next tick. NextN fills a slice a
// whole tick at a time, the path that ring buffers take.
//
// The Generator never issues the same id twice nor an id whose time is before
// that of an id it issued before. If the clock steps back by at most
// Config.MaxBackward (5ms) it waits twice the step and retries once; a larger
// step, or a clock still behind after the wait, fails with ErrClockBackwards.
// Across restarts the same holds through Config.Lease and Config.LastIssued:
// before it uses a time beyond its last lease the Generator has Lease persist
// a new one (Now + LeaseAhead); started again with LastIssued set to the last
// lease, it issues nothing until the clock has passed it.
//
// # Source
//
// A Source is what a node runs: a Generator on a worker id claimed from a
// Registry (JetStream KV leases, ZooKeeper, a WORKER_NODE table, Static with
// a LeaseFile), with the time lease kept ahead of the clock by a goroutine
// (SourceConfig.LeaseAhead, renewed every quarter of it; further ahead by
// the time a renewal takes on a registry that is a LeaseTimer). Its states:
//
//	waiting  registered; the clock is behind the worker's last lease
//	serving  handing out ids
//	paused   the clock stepped back further than can be waited out
//	lost     the registry claim was lost; claiming a new worker id
//	closed
//
// Fill hands out whole ticks without waiting, borrowing future ticks up to
// SourceConfig.BorrowAhead (never past the persisted lease) as UidGenerator's
// CachedUidGenerator borrows future seconds; Next waits tick by tick when
// Fill has none. A restarted Source never reissues an id: it starts waiting
// until its clock has passed the last lease (or fails to start when that is
// more than SourceConfig.MaxStartWait away). After a graceful stop (Close)
// on a registry with a stop record (LeaseFile), the wait ends at the last
// time the stopped Source used instead, provided the registry's lease is
// still the one of the stop: a process that used the worker id in between
// leased past it. Every change of state is reported to
// SourceConfig.OnEvent.
//
// # Fencing
//
// A node serves a worker id only while its claim is confirmed. Every
// Registry fences (see Registry): a later Register of the same worker id
// makes every earlier registration's Lease fail with ErrNotRegistered, and
// returns a LastLease at or after every lease the earlier holder had
// confirmed, so the new holder's ids all come after the old holder's.
//
// The Source adds a bound of its own when the registry implements
// ClaimTTLer: no id is served later than ClaimTTL after the start of the
// last successful Register or Lease call, measured on SourceConfig.Monotonic
// (Go's monotonic clock by default), never on SourceConfig.Clock, which an
// operator or a fault drill may step. Fill checks the bound itself, so a process that
// wakes from a freeze (SIGSTOP, a GC pause, a VM migration) serves nothing
// before its goroutine has run; the Source confirms the claim (a Lease)
// whenever half the bound is used up. A registration past the bound, or
// whose claim was lost, is dropped for good (state lost, Fill errors wrap
// ErrClaimLapsed or say why) and the Source registers anew. A Source
// also remembers the lease each of its registrations had: registering a
// worker id again, it waits past that even if the registry has lost it
// (an operator deleted a key or row).
//
// Fill takes the generator, the lease and the bound of one registration
// together (one immutable snapshot), so it never makes ids of one
// registration under another's lease; a Fill that overlaps the loss of its
// registration returns no ids. Source.Holds tells a buffer of ids (the
// producer's ring) which worker's ids may still be handed out.
//
// Every wait goes through Config.Sleep and ends when the caller's context
// does. Layout is a value and safe to share; the Generator is safe for
// concurrent use (calls are serialized).
//
// Time comes from an internal/clock.Clock (Config.Clock, SourceConfig.Clock,
// the registries' Options.Clock; the real clock by default): its readings
// make the ticks and its tickers and timers drive the Source's loop, so a
// test moves a clock.Fake instead of sleeping.
package snowflake
