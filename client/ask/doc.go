// Package ask is the asking side of the admin subjects that every node
// answers (leaf.admin.status, leaf.admin.time, leaf.admin.floor.<tag>,
// leaf.admin.floors, $SRV.*): scatter-gather over NATS, and the admin
// requests one node answers (Admin, Request). Nodes use it among
// themselves; leafctl and the status page use it to show the cluster.
//
// It stands beside client; the serving side is package responder.
package ask
