// Package events is leafmq's monitoring events on NATS: every node
// publishes JSON Events on leaf.events.<area>.<what> (node.up,
// segment.loaded, store.error, snowflake.paused, …), so operators and tools
// can follow a cluster with one subscription (leaf.events.>) and
// `leafctl events`.
//
// One schema for every kind:
//
//	{"kind":"store.error","node":"leafd-a","time":"2026-11-22T01:02:03.456Z",
//	 "level":"error","tag":"orders","message":"loading a segment of orders failed: …",
//	 "fields":{"error":"…","failures":3},"suppressed":12}
//
// kind, node, time (UTC), level (info, warn, error) and message are always
// set; tag for events about one segment tag; fields depend on the kind (see
// the Kind constants). A Publisher rate-limits each (kind, tag) to a burst
// then one per interval, so a failing store or a hot empty ring cannot flood
// the bus; suppressed counts what was dropped since the last event of that
// kind and tag.
//
// Time comes from Config.Clock (an internal/clock.Clock, the real clock by
// default): each event's time and the rate limits' refill.
package events
