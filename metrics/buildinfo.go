package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/internal/buildinfo"
)

// BuildInfo is leafmq_build_info{version,revision,goversion,node} 1: the
// one series that names the node (its --name); the others have only
// Prometheus's instance.
func BuildInfo(node string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leafmq_build_info",
		Help: "A constant 1, labelled with the build (version, revision: the git commit, goversion) and the node's --name.",
	}, []string{"version", "revision", "goversion", "node"})
	g.WithLabelValues(buildinfo.Version, buildinfo.Revision, runtime.Version(), node).Set(1)
	return g
}
