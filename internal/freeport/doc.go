// Package freeport hands out TCP ports on 127.0.0.1 for servers that must
// be told their port before they start: cluster routes, gateways and the
// URLs other servers are configured with.
//
// Asking the kernel for a port (listening on port 0) and closing it again
// leaves a window in which the same port goes to somebody else: the
// kernel hands recently freed ephemeral ports to outgoing connections and
// to other listeners on port 0, and with many tests running side by side
// the server then fails to bind and never becomes ready. Take avoids both:
//
//   - it picks ports below the kernel's ephemeral range, which neither
//     outgoing connections nor listeners on port 0 are given;
//   - a port handed out is held, for the life of the process, by an
//     exclusive lock on a file named after it under the system's temporary
//     directory, so no other process using this package is handed it;
//   - within the process a port is handed out once.
//
// A port is checked free by listening on it before it is handed out; a
// program that is not using this package may still take it meanwhile.
package freeport
