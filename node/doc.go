// Package node assembles one leafd: NATS (an embedded nats-server with
// JetStream, or a connection to an existing NATS), the segment store
// (JetStream KV by default, MySQL/MariaDB with a DSN), the segment engine, the
// producer's rings, the snowflake ids (package snownode: worker ids from
// JetStream KV, ZooKeeper, MySQL or configuration), the micro responder and
// the HTTP port (/healthz, /metrics).
//
// Snowflake: before it claims a worker id the node compares its clock with
// the live nodes' (leaf.admin.time) and refuses to start when it is off by
// more than config.SnowflakeConfig.PeerClockMax. The responder is in the
// snowflake queue group exactly while the source serves; every change of
// state is published on leaf.events.snowflake. The node hands snownode its
// registry (openers.go) and the questions to the live nodes.
//
// The data directory (config.Config.DataDir) holds what a node keeps across
// restarts: the embedded server's JetStream store (run with sync_always:
// every reservation, lease and pool delete is fsynced before it is
// acknowledged), the snowflake lease files of every registry (snowflake/:
// static-N, kv-N and mysql-N per worker id, the ZooKeeper cache) and the
// layout the ids were made with (snowflake/layout; another one is
// refused), each tag's floor and the store's incarnation
// (segment-floors.json, a segment.FloorFile) and each tag's last dynamic
// step (segment-steps.json, a segment.StepFile). One node holds a data
// directory at a time: Start takes a flock on the directory's own inode and
// on its JetStream store's (leafd.lock names the holder; package
// internal/datadir), so a second node refuses at once: "data directory in
// use".
//
// Floors are shared, on every store: after each range it reserves (the
// engine's loads and the monotonic leaders' alike, through one
// segment.Reserver) a node announces its
// new floor of the tag and the tag's mode on leaf.floor.<tag> (with its
// store's incarnation, where the store has one: JetStream KV), and the
// engine serves no range below any floor a peer on the same store
// announced, nor a tag in another mode than a peer's; every node also
// answers leaf.admin.floor.<tag>, which tag restart and create gather. On an external NATS the node warns
// at start about every stream it depends on that has one replica, and on
// MySQL about settings under which a commit is not durable.
//
// Every node keeps a key in wire.MembersBucket while it runs, and the
// checks against live peers (the name, the worker-id checks, the floors at
// start and before a tag is created) wait for every member's answer, not
// just for a window: a slow answer is not taken for no node. Package peers
// holds all of it; the node keeps one *peers.Set (peers.go has its side).
//
// Start (start.go: the table of phases) builds everything in dependency
// order, pushing each subsystem's stop on a stack (stops.go) before it
// starts it, and Close runs the stack
// last-first: say goodbye and stop HTTP, hand the monotonic tags over,
// leave the queue groups (so NATS sends requests to the other nodes), hand
// back unserved ids, stop the engine and the store, drain the connection
// and shut the embedded server down, from wherever a start got to. No
// goroutine outlives Close. The files build on one another one way:
// node.go holds the Node and its parts, each phase's file uses only files
// below it, and start.go, on top, runs them.
//
// Start takes a config.Config (package config: one struct and one settings
// table per subsystem; its zero value is the zero-setup default). A
// segment store or worker registry is opened by name through the tables of
// openers.go, the one place a name meets its package.
package node
