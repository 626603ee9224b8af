// Package snownode runs a node's snowflake ids: it claims a worker id
// from a registry under the checks that keep two processes from serving
// one (the layout recorded in the data directory and served by the live
// nodes, the clocks of the live nodes, the leases of this data directory
// and of the live nodes), runs the snowflake.Source and its ring, and
// keeps the node in the snowflake queue group exactly while the Source
// serves.
//
// A Server is made with New before the node asks or answers anyone (its
// starting status names the worker id it registers), started with Start
// (one attempt; the node tries again while the error passes), put in the
// queue group with Serve once the node's responder runs, and stopped
// with Stop (the watchers) and Close (the ring and the Source). The
// methods of a nil *Server, a node without snowflake, do nothing and
// report none. A Server is safe for concurrent use.
package snownode
