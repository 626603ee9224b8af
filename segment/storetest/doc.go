// Package storetest is the conformance suite every segment.Store must pass.
// Each backend's tests call Run with a factory; the in-memory store runs it
// in unit tests, MariaDB and JetStream KV run it against real servers.
// Besides rows and ranges it checks that a store remembers deleted tags:
// Create refuses them (segment.ErrTagDeleted), Restart brings them back
// never below their last max_id (segment.ErrBelowFloor), and Advance
// refuses a range below a floor without changing anything.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Factory{New: func(t testing.TB) segment.Store { ... }})
//	}
package storetest
