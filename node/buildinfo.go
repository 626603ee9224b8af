package node

import (
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

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

// buildInfoCollector is leafmq_build_info{version,revision,goversion,node} 1:
// the one series that names the node (--name); the others have only
// Prometheus's instance.
func buildInfoCollector(node string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leafmq_build_info",
		Help: "A constant 1, labelled with the build (version, revision: the git commit, goversion) and the node's --name.",
	}, []string{"version", "revision", "goversion", "node"})
	g.WithLabelValues(buildinfo.Version, buildinfo.Revision, runtime.Version(), node).Set(1)
	return g
}
