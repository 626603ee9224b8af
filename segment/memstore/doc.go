// Package memstore is an in-memory segment.Store: the twin of the real stores
// for unit tests and a reference for the conformance suite. It keeps nothing
// across restarts, so it must never back a production node.
//
// A Store is safe for concurrent use. SetDown makes every call fail with
// segment.ErrUnavailable, to test outages.
package memstore
