// Command leafchaos is leafmq's chaos soak: it starts 3 nats-servers, MariaDB,
// ZooKeeper and 3 leafd processes on loopback, every link through an
// in-process Toxiproxy, takes ids at a bounded rate while it injects the
// fault model on a schedule — kill -9, SIGSTOP past every TTL, clock steps
// and offsets both ways, more hosts on 127.0.0.2 and 127.0.0.3 with
// identical flags, latency/blackhole/reset/partition on each link, lost
// commit replies, and (on a cluster of its own) operator errors — and checks
// that no id was ever handed out twice, and that no node hands out a
// segment id below a range already issued after a restart or an operator's
// act. It measures availability per fault and class of request (during
// the fault, after its heal, the time to 99.9% answered within 1 s) and
// asks each node one by one whether it serves what it says it serves. See
// package cmd/leafchaos/internal/chaos.
//
//	leafchaos [--duration 3m] [--rate 3000] [--faults a,b,...] [--freeze 13s]
//	          [--hosts-for 8s] [--net-for 4s] [--availability-goals] [--overlap]
//	          [--json report.json] [--keep] ...
//
// With --regions 2 or 3 it runs the many-regions mode instead: per region
// a NATS cluster (cluster r0, r1, …, JetStream on) of one nats-server, or
// three with --servers-per-region 3 (the leafds then keep their buckets
// with 3 replicas in the region), joined by gateways through Toxiproxy
// links with --gateway-latency each way, one leafd per region
// (--leafds-per-region 2 for two) with --regions N --region-id i on
// JetStream KV, no MariaDB or ZooKeeper, clients in every region, and the
// faults region-cut, region-kill and region-partition (--region-for
// each); it reports each region's in-region latency, the gateway round
// trip, each region's answered share during each fault and after its
// heal (the time to 99.9% within 1 s), and duplicates across every
// region's ids, and judges each region (docs/regions.md, Tested as
// deployed).
//
//	leafchaos --regions 2 [--servers-per-region 3] [--leafds-per-region 2]
//	          [--gateway-latency 30ms] [--region-for 8s] [--availability-goals]
//	          [--faults region-cut,region-kill,region-partition] [--rate 600]
//
// --list-faults prints every fault and exits. Exit codes: 0 pass, 1 the run
// failed (a duplicate, a segment id below an issued floor, a crash, a fault
// not injected; with --availability-goals, a goal missed) or could not
// start, 2 bad arguments. Ctrl-C ends the load
// early; everything started is stopped and the ids taken so far are still
// checked.
package main
