// Package storetest is the conformance suite every segment.Store must pass.
// Each backend's tests call Run with a factory; the in-memory store runs it
// in unit tests, MariaDB and JetStream KV run it against real servers.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Factory{New: func(t testing.TB) segment.Store { ... }})
//	}
package storetest
