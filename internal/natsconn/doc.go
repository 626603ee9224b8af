// Package natsconn makes and keeps a node's NATS: an embedded nats-server
// with JetStream (its store fsynced on every write, its log on the node's
// slog.Logger) and a connection to it in the same process, or a connection
// to an existing NATS; more connections with the same options (Dial,
// DialMember); and the round trip to NATS of each connection, measured off
// the request path, the node's being its worst connection's (StartRTT,
// RTT, SteadyRTT).
//
// New only records the Options; Connect starts the embedded server, if
// any, and connects. A failed Connect may be tried again: it reuses the
// embedded server an earlier try started, which Shutdown stops. Drain
// ends the connection.
//
// Both ends of the connection ping every 5 s and give a link up after 2
// unanswered pings, so a link that swallows bytes is noticed within
// seconds, and the handshake may take 10 s, so a node far from NATS
// connects.
//
// Connect, Drain and Shutdown are called by one goroutine, in that order
// (a node's start and stop); NC, Server, Dial, DialMember, ClientURL, RTT
// and SteadyRTT may then be called from any goroutine.
package natsconn
