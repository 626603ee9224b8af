// Package metrics is what a node exports on /metrics (leafmq_*): a
// Collector that reads the node's state at scrape time, so the request path
// pays nothing for it, and Live, the request counters updated as requests
// are answered (the responder's and the HTTP API's Observe hooks, the
// segment engine's loads).
//
// The Collector holds no node: it reads Sources, the values, functions and
// small interfaces of what it reports, each optional. Metric names, help
// texts and labels are a contract with deploy/alerts.yml and the
// dashboards (deploy's TestMetricListMatchesNode keeps the list in step).
//
// Label values are bounded: engines, codes, subjects and event kinds are a
// handful; series by tag stop at MaxTagSeries.
//
// A Collector and a Live are safe for concurrent use.
package metrics
