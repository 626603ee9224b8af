// Package bench is the engine of `leafctl bench`: it puts request load on
// leafd over NATS and measures throughput and latency, and it measures the
// same load against a bare echo responder so the two can be compared.
//
// # What it measures
//
// Workers send the exact wire format of package wire to Options.Subject (an
// empty body for one id, a decimal N for a batch, the Leaf-Encoding: binary
// header if asked) and time each request from send to reply:
//
//   - ModeRequest: each worker is one goroutine calling nc.RequestMsg in a
//     loop, so Concurrency requests are in flight. This is how a service
//     using leafd usually calls it, and its latency is the one users see.
//   - ModePipelined: each worker keeps Depth requests in flight on one reply
//     subscription ("<inbox>.*", one token per request), so the load is
//     Concurrency×Depth requests deep and measures what the responder can
//     take rather than what one synchronous caller sees.
//
// Without Options.Rate the load is closed-loop: as fast as replies come back.
// With a Rate, requests are due on one schedule shared by all workers
// (slot k at start + k/Rate) and latency runs from the due time, not from the
// moment a worker got round to sending. A server that stalls for 100ms thus
// shows 100ms of late requests in the percentiles instead of quietly lowering
// the send rate (coordinated omission), so "p99.9 at 50k req/s" means what it
// says. If the achieved req/s is well under Rate, the client or the server
// could not keep up and the latencies include the backlog; the run still
// ends after Duration, leaving the rest of the backlog unsent.
//
// The first Warmup of load is not recorded (connections, buffers, ring
// refills and the Go scheduler settle). Requests that end in an error reply,
// a timeout or a malformed reply are counted by code in ErrorsByCode; the
// throughput and latency figures cover successful requests only. Latencies
// go into an HdrHistogram (three significant digits) per worker,
// merged at the end. With Check, every reply is decoded, must hold exactly
// Batch ids, and every id goes into a compact bitmap set (about a bit per id
// for leafmq's clustered ids) to count duplicates.
//
// # Why the baseline
//
// Absolute numbers from one machine, especially a small or shared one, say
// more about the machine than about leafd: the NATS server, the client and
// leafd share the same few cores. RunBaseline runs the identical load (same
// mode, concurrency, batch, encoding, reply size) against an echo responder
// that answers every request with prebuilt bytes on its own connection to the
// same server, in the same queue-group style; leafd's responder also has a
// connection of its own, so both paths are client connection -> server ->
// responder connection -> server -> client. The echo's throughput is the
// ceiling NATS allows on this machine at that moment, and Report prints
// leafd/baseline: a ratio of 0.8 means leafd adds 25% to the cost of the bare
// round trip, a figure that carries from a laptop to a server far better than
// either req/s alone. Run both back to back (RunAll) so they see the same
// machine load; on a noisy machine repeat the pair and compare ratios.
//
// # Concurrency and lifecycle
//
// Run, RunBaseline and RunAll may be called concurrently, each on its own
// Options; they share nothing but the connection. Each owns its goroutines
// (workers, the progress writer, the echo's connection) and none outlives the
// call. Options.Progress is written only from Run's own goroutine and only
// before Run returns.
package bench
