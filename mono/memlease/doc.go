// Package memlease is an in-memory mono.Lease for tests and single-process
// use: holdings expire TTL after their last acquire or renewal on its
// clock. It passes mono/leasetest.
package memlease
