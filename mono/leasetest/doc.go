// Package leasetest is the conformance suite of mono.Lease: every
// implementation (mono/memlease, mono/kvlease) runs it.
//
// The room: floor 3 of the README's Layout; it imports mono, the standard
// library and outside modules. No package it imports stands on its floor or
// above (farm-studio look: no arrow runs up).
package leasetest
