// Package natstest starts real, embedded nats-server instances for tests.
//
// It is a normal package (not _test files) so that every package's tests can
// import it. Each helper takes a testing.TB, calls t.Helper, fails the test
// with t.Fatal on error, and registers its own clean-up with t.Cleanup:
//
//	func TestSomething(t *testing.T) {
//		srv := natstest.RunServer(t)              // JetStream on, port -1
//		nc := natstest.Connect(t, srv.ClientURL())
//		js, _ := jetstream.New(nc)
//		...
//	}
//
// RunCluster starts n routed servers in one process and waits until the
// routes are up and a JetStream meta leader has been elected, so the first
// JetStream API call does not hang. Servers listen on 127.0.0.1 only, on
// ports picked by the kernel (client port -1) or found free (cluster ports),
// and keep their JetStream data under t.TempDir().
//
// RunSuperCluster starts clusters of one to three such servers joined by
// NATS gateways (the regions of a supercluster), every gateway connection
// into a cluster passing through a proxy of its own, so that a test can
// slow or cut what one cluster receives from the others:
//
//	sc := natstest.RunSuperCluster(t, 1, 2) // c0: one server, c1: two
//	near := natstest.Connect(t, sc.URL(0))  // ConnectedClusterName() == "c0"
//	sc.Slow(0, 60*time.Millisecond)         // and sc.Slow(1, …): +120 ms a round trip
//	sc.Cut(0); sc.Cut(1)                    // a partition between c0 and c1
//	sc.Heal(0); sc.Heal(1)                  // the gateways connect again
//
// Proxy puts a Toxiproxy proxy between a client and a server, and BothWays
// slows or cuts the link in both directions, for tests of a node far from
// NATS or behind a partition.
//
// The helpers are safe to call from parallel tests.
package natstest
