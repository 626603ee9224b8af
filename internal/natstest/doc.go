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
// Proxy puts a Toxiproxy proxy between a client and a server, and BothWays
// slows or cuts the link in both directions, for tests of a node far from
// NATS or behind a partition.
//
// The helpers are safe to call from parallel tests.
package natstest
