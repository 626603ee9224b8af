// Package responder is leafmq's NATS face: two NATS micro services,
// "leaf-segment" (ids of tags, from the producer's rings, and admin requests
// of the segment store) and "leaf-snowflake" (snowflake ids), named so that
// `nats micro ls` says what each serves. Every node joins the queue group "leaf",
// so NATS spreads requests over the nodes and fails over when one leaves.
//
// Subjects (see package wire for the encodings):
//
//	leaf.segment.<tag>     ids of a tag: empty body = 1, decimal N = N ids
//	leaf.mono.<tag>        ids of a monotonic tag, strictly increasing, as for
//	                       segment; only the tag's leader answers (ServeMono)
//	leaf.admin.tags        JSON list of every tag row
//	leaf.admin.tag.create  JSON {"tag","step","max_id","description"} -> the row
//	leaf.admin.tag.step    JSON {"tag","step"} -> the row
//	leaf.admin.tag.max     JSON {"tag","max_id"} -> the row (max_id may only grow)
//	leaf.admin.tag.restart JSON {"tag","floor"} -> the row: a deleted tag back at an
//	                       explicit floor, never below what the store remembers
//	                       nor below any live node's floor (create too)
//	leaf.admin.floor.<tag> this node's floor of the tag, JSON wire.NodeFloor;
//	                       every node answers
//	leaf.snowflake         snowflake ids, as for segment (also leaf.snowflake.<key>)
//	leaf.snowflake.decode  decimal id -> JSON wire.Decoded
//	leaf.admin.time        this node's clock, JSON wire.NodeTime; every node answers
//
// With Config.Scope (a node of a region) leaf.admin.floor.<tag>,
// leaf.admin.time and the tag announcements are answered on the region's
// subjects instead (leaf.in.<region>.admin.floor.<tag>, …; wire.Scope),
// and the status on leaf.in.<region>.admin.status as well as on
// leaf.admin.status.
//
// The snowflake endpoints are a micro service of their own (same name and
// queue group) that SetSnowflake adds and stops, so a node whose clock is
// behind leaves the queue group for snowflake while it keeps serving
// segments. With Config.SegmentConn the segment endpoint is one too, a
// second "leaf-segment" beside the admin endpoints, that SetSegment adds
// and stops: a node too slow to answer in time leaves while faster nodes
// serve. Each such membership subscribes on a connection of its own.
// SlowYield decides when a slow node stays out (Yield, for segment and
// snowflake) and its SegmentKeeper applies that to the segment endpoint.
//
// leaf.mono.<tag> is no micro endpoint: the node calls ServeMono while it
// leads the tag (package mono) and stops it when it no longer does, and
// the subscription is a plain one, outside the queue group (ServeMono says
// why).
//
// Errors are micro error headers with HTTP-like codes, mapped from the
// engines' sentinel errors by one table (codeOf): 400 for bad input
// (including a floor below ids already issued), 404 for an unknown or
// deleted tag (and auto-create refused on a replaced store), 503 when no id
// can be had now, 500 otherwise.
//
// The subscription's own goroutine never waits: it answers a small request
// at once when the tag's ring holds every id asked for (the common case, with
// no hand-off), and passes everything else — large batches, an empty ring,
// a tag not seen yet — to a pool of workers that may wait (boundedly) for the
// store. So one slow tag or a store outage never holds up the other requests
// of a node. A Responder is safe for concurrent use.
//
// A probe (wire.ProbeToken, wire.ProbeHeader) takes no id: a node's
// subscriptions answer it and count it (Probed), and its Prober sends one
// on each subject the node serves every few seconds, through the queue
// group that clients reach.
//
// Time comes from Config.Clock (an internal/clock.Clock, the real clock by
// default): the leaf.admin.time answer, the Took of each Observation and
// the polls of Stop's wait for in-flight requests.
package responder
