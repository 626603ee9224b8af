// Package deploy holds what runs leafmq outside Go — schema.sql, NATS
// configurations, Prometheus rules, Grafana, compose, Kubernetes, systemd
// and the Dockerfile — and the tests that check each of them against the
// built binaries and real servers (make test runs them).
//
// It has no Go code of its own: its tests (package deploy_test) stand on
// the top floor of the README's Layout, beside cmd/, and may import any
// package below (today node, pool, snowflake, wire, internal/testenv). No
// package imports it.
package deploy
