// Package node assembles one leafd: NATS (an embedded nats-server with
// JetStream, or a connection to an existing NATS), the segment store
// (JetStream KV by default, MySQL/MariaDB with a DSN), the segment engine, the
// producer's rings, the micro responder and the HTTP port (/healthz,
// /metrics).
//
// Start builds everything in dependency order and Close tears it down in
// reverse: leave the queue group first (so NATS sends requests to the other
// nodes), then stop refills, the engine and the store, drain the connection
// and shut the embedded server down. No goroutine outlives Close.
//
// Config is filled from flags and LEAF_* environment variables by Parse; its
// zero value is the zero-setup default.
package node
