package buildinfo

import (
	"fmt"
	"regexp"
	"runtime"
)

// Version (SemVer: the NATS micro service refuses anything else) and
// Revision (the git commit) of the build.
var (
	Version  = "0.0.0-dev"
	Revision = "unknown"
)

// semver is SemVer 2.0.0's grammar.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ValidVersion reports whether v is SemVer.
func ValidVersion(v string) bool { return semver.MatchString(v) }

// String is one line naming the build, for --version.
func String() string {
	return fmt.Sprintf("%s (revision %s, %s %s/%s)", Version, Revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
