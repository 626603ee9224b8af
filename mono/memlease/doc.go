// Package memlease is an in-memory mono.Lease for tests and single-process
// use: holdings expire TTL after their last acquire or renewal on its
// clock. It passes mono/leasetest.
//
// The room: floor 3 of the README's Layout; it imports internal/clock, mono,
// the standard library and outside modules. No package it imports stands on
// its floor or above (farm-studio look: no arrow runs up).
package memlease
