// Package wire is leafmq's NATS wire protocol, shared by the responder (the
// server side) and by clients: how a request names its count, how ids are
// encoded in a reply, and how errors travel in the NATS micro error headers.
//
// Request: the body is empty (one id) or a decimal count N, 1..max batch.
// Surrounding ASCII white space is ignored, nothing else is.
//
// Reply: by default decimal ids, one per line, separated by "\n" (no trailing
// newline), so that the nats CLI prints them:
//
//	nats req leaf.segment.demo ''
//
// A request with the header "Leaf-Encoding: binary" gets packed big-endian
// uint64s instead, 8 bytes per id.
//
// Errors: the reply carries the micro headers Nats-Service-Error-Code (an
// HTTP-like code: 400 bad request, 404 unknown tag, 503 not ready or store
// down, 500 internal) and Nats-Service-Error (a message). An error reply
// never carries ids; a success never carries fewer ids than asked for.
//
// Tags: a tag name is checked once, where it enters (a request subject, an
// HTTP path, a leafctl argument, a client call, a configuration file, a row
// read from a store), by ParseTag, into a Tag; the engines, stores and
// leaders below take a Tag and check nothing again. Tag lives here, on the
// lowest floor, because every edge already imports wire and the engines may
// too; ErrInvalid, the error a bad name wraps, lives with it (segment's
// ErrInvalid is the same error), so errors.Is and the 400 are unchanged.
//
// Everything here is pure and safe for concurrent use.
package wire
