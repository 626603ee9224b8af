// Command leafd is the leafmq daemon: it serves unique ids over NATS.
//
// With no flags it embeds a nats-server with JetStream on 127.0.0.1:4222,
// keeps its segment table in JetStream KV under ./data, serves /healthz and
// /metrics on 127.0.0.1:8080, and prints how to ask it for an id. See
// `leafd -h` for the flags and their LEAF_* environment equivalents.
package main
