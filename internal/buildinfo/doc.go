// Package buildinfo holds the version and revision that scripts/build.sh
// stamps into leafd and leafctl:
//
//	-ldflags "-X github.com/leafmq/leafmq/internal/buildinfo.Version=1.2.3 -X github.com/leafmq/leafmq/internal/buildinfo.Revision=<commit>"
//
// Every command can say what it is without linking a server.
package buildinfo
