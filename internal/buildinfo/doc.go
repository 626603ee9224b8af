// Package buildinfo holds the version and revision that scripts/build.sh
// stamps into leafd and leafctl:
//
//	-ldflags "-X github.com/leafmq/leafmq/internal/buildinfo.Version=1.2.3 -X github.com/leafmq/leafmq/internal/buildinfo.Revision=<commit>"
//
// Every command can say what it is without linking a server.
//
// The room: floor 1 of the README's Layout; it imports only the standard
// library and outside modules. No package it imports stands on its floor or
// above (farm-studio look: no arrow runs up).
package buildinfo
