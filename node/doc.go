// Package node assembles one leafd: NATS (an embedded nats-server with
// JetStream, or a connection to an existing NATS), the segment store
// (JetStream KV by default, MySQL/MariaDB with a DSN), the segment engine, the
// producer's rings, the snowflake source and its ring (worker ids from
// JetStream KV, ZooKeeper, MySQL or configuration), the micro responder and
// the HTTP port (/healthz, /metrics).
//
// Snowflake: before it claims a worker id the node compares its clock with
// the live nodes' (leaf.admin.time) and refuses to start when it is off by
// more than Config.PeerClockMax. The responder is in the snowflake queue
// group exactly while the source serves; every change of state is published
// on leaf.events.snowflake.
//
// The data directory (Config.DataDir) holds what a node keeps across
// restarts: the embedded server's JetStream store, the static and ZooKeeper
// registries' lease files (snowflake/), and each tag's last dynamic step
// (segment-steps.json, a segment.StepFile), so a restarted node starts busy
// tags at the step they had.
//
// Start builds everything in dependency order and Close tears it down in
// reverse: leave the queue group first (so NATS sends requests to the other
// nodes), then stop refills, the engine and the store, drain the connection
// and shut the embedded server down. No goroutine outlives Close.
//
// Config is filled from flags and LEAF_* environment variables by Parse; its
// zero value is the zero-setup default.
package node
