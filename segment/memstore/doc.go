// Package memstore is an in-memory segment.Store: the twin of the real stores
// for unit tests and a reference for the conformance suite. It keeps nothing
// across restarts, so it must never back a production node.
//
// Like the real stores it remembers deleted tags: Create refuses them with
// segment.ErrTagDeleted, Restart brings them back at a floor no lower than
// their last max_id. Lower, Forget and Replace play an operator's mistakes
// (a lowered max_id, a tag or a whole bucket gone without a trace).
//
// A Store is safe for concurrent use. SetDown makes every call fail with
// segment.ErrUnavailable, to test outages.
package memstore
