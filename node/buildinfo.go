package node

import (
	"fmt"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/buildinfo"
)

// checkVersion refuses a build stamped with a version that is not SemVer:
// the NATS micro service would refuse it later, less clearly.
func checkVersion(v string) error {
	if !buildinfo.ValidVersion(v) {
		return fmt.Errorf("%w: leafd was built with version %q, which is not SemVer (build with scripts/build.sh)", config.ErrConfig, v)
	}
	return nil
}
