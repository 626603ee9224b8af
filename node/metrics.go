package node

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector reads the node's state at scrape time, so the request path pays
// nothing for metrics.
type collector struct {
	n        *Node
	requests *prometheus.Desc
	errors   *prometheus.Desc
	procSecs *prometheus.Desc
	ringLen  *prometheus.Desc
	ringCap  *prometheus.Desc
	takes    *prometheus.Desc
	rejTakes *prometheus.Desc
	rejPuts  *prometheus.Desc
	refills  *prometheus.Desc
	tags     *prometheus.Desc
	loads    *prometheus.Desc
	asyncErr *prometheus.Desc
	step     *prometheus.Desc
	ready    *prometheus.Desc
}

func newCollector(n *Node) *collector {
	label := prometheus.Labels{"node": n.cfg.Name}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("leafmq_"+name, help, labels, label)
	}
	return &collector{
		n:        n,
		requests: d("requests_total", "Requests answered by endpoint.", "endpoint"),
		errors:   d("request_errors_total", "Requests answered with an error, by endpoint.", "endpoint"),
		procSecs: d("request_processing_seconds_total", "Time spent in handlers, by endpoint.", "endpoint"),
		asyncErr: d("worker_request_errors_total", "Segment requests answered with an error by a worker (not in request_errors_total)."),
		ringLen:  d("ring_ids", "Ids ready in the ring of a tag.", "tag"),
		ringCap:  d("ring_capacity", "Capacity of the ring of a tag.", "tag"),
		takes:    d("ring_takes_total", "Ids taken from the ring of a tag.", "tag"),
		rejTakes: d("ring_rejected_takes_total", "Takes that found the ring of a tag empty.", "tag"),
		rejPuts:  d("ring_rejected_puts_total", "Ids dropped because the ring of a tag was full.", "tag"),
		refills:  d("ring_refills_total", "Refills of the ring of a tag.", "tag"),
		tags:     d("segment_tags", "Tags known to the segment engine."),
		loads:    d("segment_loads_total", "Segments loaded from the store (one store transaction each), by tag.", "tag"),
		step:     d("segment_step", "Step of the last segment loaded, by tag (dynamic step).", "tag"),
		ready:    d("segment_ids_ready", "Ids left in both segment buffers of a tag.", "tag"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.errors, c.procSecs, c.ringLen, c.ringCap,
		c.takes, c.rejTakes, c.rejPuts, c.refills, c.tags, c.loads, c.step, c.ready, c.asyncErr} {
		ch <- d
	}
}

// maxTagSeries caps per-tag series so a node with many tags cannot blow up
// the scrape.
const maxTagSeries = 500

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	if n.resp != nil {
		ch <- prometheus.MustNewConstMetric(c.asyncErr, prometheus.CounterValue, float64(n.resp.AsyncErrors()))
		for _, e := range n.resp.Service().Stats().Endpoints {
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(e.NumRequests), e.Name)
			ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(e.NumErrors), e.Name)
			ch <- prometheus.MustNewConstMetric(c.procSecs, prometheus.CounterValue, e.ProcessingTime.Seconds(), e.Name)
		}
	}
	if n.prod != nil {
		for i, r := range n.prod.Rings() {
			if i == maxTagSeries {
				break
			}
			ch <- prometheus.MustNewConstMetric(c.ringLen, prometheus.GaugeValue, float64(r.Len), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.ringCap, prometheus.GaugeValue, float64(r.Cap), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.takes, prometheus.CounterValue, float64(r.Stats.Takes), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.rejTakes, prometheus.CounterValue, float64(r.Stats.RejectedTakes), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.rejPuts, prometheus.CounterValue, float64(r.Stats.RejectedPuts), r.Tag)
			ch <- prometheus.MustNewConstMetric(c.refills, prometheus.CounterValue, float64(r.Stats.Refills), r.Tag)
		}
	}
	if n.engine != nil {
		tags := n.engine.Tags()
		ch <- prometheus.MustNewConstMetric(c.tags, prometheus.GaugeValue, float64(len(tags)))
		for i, tag := range tags {
			if i == maxTagSeries {
				break
			}
			st, ok := n.engine.State(tag)
			if !ok {
				continue
			}
			var ready int64
			for _, sg := range st.Segments {
				if sg.Ready {
					ready += sg.Max - sg.Value
				}
			}
			ch <- prometheus.MustNewConstMetric(c.loads, prometheus.CounterValue, float64(st.Loads), tag)
			ch <- prometheus.MustNewConstMetric(c.step, prometheus.GaugeValue, float64(st.Step), tag)
			ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(ready), tag)
		}
	}
}
