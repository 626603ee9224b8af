// Command leafd is the leafmq daemon: it serves unique ids over NATS.
//
// With no flags it embeds a nats-server with JetStream on 127.0.0.1:4222,
// keeps its segment table in JetStream KV under ./data, serves /healthz and
// /metrics on 127.0.0.1:8080, and prints how to ask it for an id. See
// `leafd -h` for the flags and their LEAF_* environment equivalents.
//
// The room: floor 6 of the README's Layout; it imports internal/buildinfo,
// node, the standard library and outside modules. No package it imports
// stands on its floor or above (farm-studio look: no arrow runs up).
package main
