// Package segment is the Leaf-segment id engine: the Store seam to the
// database (one row per biz_tag, advanced atomically by a step) and the
// Engine that turns those rows into ids, as Meituan Leaf's SegmentIDGenImpl
// does, with a few improvements.
//
// # Double buffer
//
// For every tag the Engine keeps two segments: the current one, from which
// ids are handed out by an atomic add on its cursor, and the next one. When
// the current segment has used LoadFactor (default 10%) of its ids, a single
// background loader per tag asks the Store for the next segment. When the
// current segment is exhausted the engine switches to the next one. A store
// that is slow or down is therefore invisible until both segments are empty;
// then a caller waits at most Config.ReadyWait for the loader and fails with
// an error wrapping ErrNotReady (and the last load error, for example
// ErrUnavailable). A failed load is retried in the background with capped
// exponential backoff.
//
// # Dynamic step
//
// The first load of a tag uses the step of its row (Store.Advance, step 0). Every later
// load picks a step from the time since the previous load, as Leaf does
// (StepWindow defaults to 15 minutes, MaxStep to 1,000,000):
//
//	since previous load     next step
//	< StepWindow            min(step*k, MaxStep), k = 2 (Leaf), or, when the
//	                        loads are a second or more apart, the power of
//	                        two nearest below StepWindow/since, at most 16
//	< 2*StepWindow          step
//	otherwise               step/2, unless that is below the row's step (then step)
//
// and asks for it with Store.Advance. The row's step (minStep) is re-read on
// every load, so an operator's change is picked up by the next load. Three
// improvements over Leaf: a segment used up much faster than StepWindow
// (over a second or more) grows the step up to 16x at once (a restarted node under load reaches a
// step that outlasts a store outage in a few loads, not ten); a step below
// the row's step is raised to it; and growth clamps at MaxStep (Leaf keeps the step when doubling would pass
// MAX_STEP, so a row step of 2000 never gets past 512,000 and a busy tag
// costs twice the store transactions it needs).
//
// With Config.Steps (a StepFile in leafd's data directory) the step also
// survives a restart: a tag's first load asks for the step of its last load
// before the restart, if that is less than 2*StepWindow old, instead of the
// row's step (even one below a row's step raised meanwhile: the next load
// applies the row's). Leaf starts again from the row's step, so a node restarted
// under load needs several loads (store transactions) to grow its buffers
// back, and an outage of the store in that time runs them dry.
//
// # Tags
//
// Start lists the tags of the store and preloads the first segment of each,
// so that the first request does not wait; a refresher then adds new tags and
// drops deleted ones every RefreshInterval. A tag missing from the cache is
// looked up in the store (at most once per NegativeTTL per name) and, with
// AutoCreate, created — unless the store remembers that the tag existed
// (ErrTagDeleted, see below) or was replaced (ErrStoreChanged).
//
// # Deleted tags, lowered max_id, replaced stores
//
// A tag's ids are unique only as long as its max_id never goes back. Three
// guards keep an operator's mistake from making it go back:
//
//   - The stores remember deleted tags: a KV delete or purge marker is
//     history, not absence (segment/kvstore); MySQL keeps the highest max_id
//     of every tag in leaf_alloc_history (segment/mysql). Create, and so
//     AutoCreate, refuse such a tag with ErrTagDeleted. Store.Restart (leafctl
//     tag restart TAG --floor N) is the only way back, and refuses a floor
//     below any max_id the store remembers (ErrBelowFloor).
//   - Each Engine keeps every tag's floor, the highest range end it ever
//     received (Config.Floors; leafd keeps a FloorFile in its data
//     directory), and refuses a range that starts below it: ErrBelowFloor,
//     logged at error level and reported in a LoadEvent, and no id served
//     from it. Every store checks the floor in the allocation itself
//     (Store.Advance), so a refused load takes no range: otherwise the
//     retries would push max_id past this node's floor into ranges other
//     nodes served. One Reserver applies this rule, records the floor and
//     announces it (Announcer), for the engine's loads and for a monotonic
//     tag's leader alike. The loader retries with backoff as for any
//     failed load until an operator restarts the tag at or above the
//     highest floor any node reports. A FloorFile writes (and
//     fsyncs) each new floor right behind the load, without holding up the
//     first id; FloorFile's doc gives the argument why that order is safe.
//   - Stores that implement Incarnation (segment/kvstore: the bucket's
//     stream creation time) name their storage; the Engine records it with
//     the floors and, once it differs (the bucket was deleted and made
//     again), refuses AutoCreate with ErrStoreChanged until an operator
//     restarts the tags it needs and, with the node stopped, removes the
//     "store" entry from its floor file (its floors stay). Nothing accepts a
//     new store by itself: a node that did would auto-create, at 1, tags
//     that only other nodes served.
//     The Reserver reads the incarnation again after each range's floor is
//     recorded and before any id of it is served, and drops a range the
//     store granted before it was replaced (Reserver.checkIncarnation).
//
// What the guards cannot see: a node that never served a tag has no floor
// for it, and a store that lost every trace of a tag (a KV bucket replaced,
// its delete markers compacted away, leaf_alloc_history edited by hand)
// cannot refuse it; such a tag is safe only on the nodes that served it.
//
// # Regions
//
// A deployment of many regions, each with a store of its own, gives each
// region the ids l*N + R of its local sequence numbers l (Config.Regions,
// docs/regions.md), and an opaque tag the ids P(l)*N + R, P a permutation
// of the region's share of the domain: every id of region R is R mod N, in
// every mode, so ids of two regions never meet, and no region asks
// another for anything. The mapping is made where ids leave the buffers
// (Fill, Reserve); the stores, the floors and the hand-back count local
// numbers. A local number whose id would pass the tag's limit is never
// served (ErrDomainExhausted).
//
// A store's local numbers are one region's: a store that implements
// RegionMarker records the region it serves (RegionMark), and
// CheckRegionMark, run by leafd before the engine starts, refuses a store
// recorded for another region id, region count or name, and a store with a
// record used without regions: its numbers would map to ids served before.
//
// # Guarantees
//
// An id is handed out at most once per Engine, and only from a range the
// Store returned (so committed) before and that starts at or above the
// tag's floor; ids below 1 are skipped. Ids left in
// the buffers when the process stops are lost: a gap, never a duplicate.
//
// The Engine and every Store implementation are safe for concurrent use.
//
// Time comes from Config.Clock (an internal/clock.Clock, the real clock by
// default): the dynamic step, the negative cache, the waits for a segment,
// the refresher and Retire's wait all read it or run on its timers, so tests
// move a clock.Fake. A StepFile has a clock of its own (OpenStepFileClock)
// for its write-behind (FlushEvery) and its age cut.
//
// Tag names: the Engine and the Stores take a wire.Tag, a name checked once
// where it came in (wire.ParseTag: a request subject, an HTTP path, a
// leafctl argument, a configuration); they do not check names again. Names
// this package reads itself (a store's listing, the floor and step files)
// are checked as they are read.
package segment
