// Package leasetest is the conformance suite of mono.Lease: every
// implementation (mono/memlease, mono/kvlease) runs it.
package leasetest
