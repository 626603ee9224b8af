// Package registrytest is the conformance suite of snowflake.Registry: every
// backend (static, JetStream KV, ZooKeeper, a WORKER_NODE table) runs Run
// against itself in its own tests.
//
//	func TestConformance(t *testing.T) {
//		registrytest.Run(t, registrytest.Factory{
//			New:      func(t testing.TB) snowflake.Registry { ... },
//			Distinct: true,
//			Durable:  true,
//			Takeover: func(t testing.TB, r snowflake.Registry, worker int64) { ... },
//		})
//	}
//
// The Fenced case (a frozen holder is fenced) needs Factory.Takeover: it freezes a
// holder past its claim, lets another registry claim the same worker id,
// wakes the first and checks that none of its Leases succeeds any more.
package registrytest
