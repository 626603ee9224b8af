// Package chaos is leafmq's soak harness: it runs a real cluster — three
// nats-server processes with JetStream, MariaDB and ZooKeeper (started by
// scripts/mariadb.sh and scripts/zookeeper.sh), three leafd processes —
// puts a bounded request load on it, injects faults on a schedule, and
// checks every id it was given.
//
// # The cluster
//
// All on loopback, in a fresh work directory. Every leafd gets the three
// NATS URLs, keeps segments in MariaDB (Leaf's leaf_alloc, the tags created
// up front), keeps the pool of the first tag and of snowflake full, and
// uses JetStream with three replicas. Two take snowflake worker ids from
// ZooKeeper (each with its own --zk-addr), one from JetStream KV leases.
// Every link goes through an in-process Toxiproxy (package
// github.com/Shopify/toxiproxy/v2): leafd→each nats-server, leafd→MariaDB,
// leafd→ZooKeeper, and each NATS route from one server to another (the
// servers advertise neither routes nor client URLs, so nothing bypasses the
// proxies). The harness's own clients connect to the servers directly.
//
// # The load
//
// Config.Rate requests a second on one schedule (a slot every 1/Rate s; a
// slot no worker is free for is counted as dropped, never sent late), of
// which 45% single segment ids and 15% segment batches spread over the
// tags, 30% single snowflake ids and 10% snowflake batches (2 to MaxBatch
// ids, binary replies); plus Config.PoolRate pool.Take calls a second,
// alternating between the two pools. Every request has Config.Timeout.
//
// # The faults
//
// The main track strikes the main cluster one fault at a time, spread
// evenly from a warm-up to a cool-down, cycling through the main faults of
// Config.Faults; the load goes on past Duration until each was injected
// once. With Config.Overlap (quick runs) it runs as two lanes at the same
// time: the faults that stop or restart a main leafd, and the rest. The
// faults (constants Fault…):
//
//   - crash: kill -9 of a random leafd (restarted with the same flags), of a
//     nats-server (restarted 9 s later, on its data), of ZooKeeper (started
//     again on the same port and data);
//   - freeze, SIGSTOP for Config.Freeze (past the KV claim TTL and the
//     ZooKeeper session timeout, 10 s each) then SIGCONT: MariaDB
//     (pause-db, for DBPause), a nats-server, ZooKeeper, and a leafd — the
//     KV-lease one or a ZooKeeper one — while a "taker" leafd with its
//     registry flags (for ZooKeeper its --zk-addr) starts and takes what it
//     held; both then serve for HostsFor;
//   - clock: a leafd restarted with --fault-clock-step ±1s@5s or ±10s@5s,
//     or with --fault-clock-offset ±800ms, then back on the real clock;
//   - many hosts: two more leafd on 127.0.0.2 and 127.0.0.3 with identical
//     flags and ports (the same --http port), worker ids from KV leases,
//     from ZooKeeper with --zk-addr, or from ZooKeeper without it, serving
//     for HostsFor;
//   - network, for NetFor, on the links leafd↔NATS, leafd↔MariaDB,
//     leafd↔ZooKeeper and NATS↔NATS (one server cut off): latency,
//     blackhole, reset and partition; and MariaDB's replies dropped while
//     leafd's statements still reach it (commits whose reply never arrives).
//
// The operator track runs the operator faults (op-…) at the same time on a
// cluster of its own (one nats-server with JetStream, leafd processes per
// scenario, the main MariaDB's database leafop and the main ZooKeeper
// under another --zk-name): a key of bucket leaf_alloc deleted, the bucket
// deleted and made again, a row of leaf_alloc deleted (nodes with
// --auto-create true), max_id lowered, step changed, the worker znodes
// deleted, two leafd on one --data directory; and the bucket replaced
// while a node 50 ms from NATS (a proxy of its own) restarts on its data
// directory: once its engine has loaded the tag, before it is ready; a
// newcomer is then asked for the tag. See opTrack.
//
// # The checks
//
// Every id answered goes into the id space of its tag (or snowflake) as
// runs of consecutive ids (24 bytes a run: a batch is one run, a single id
// one at worst), sorted at the end: any id covered twice is a duplicate and
// fails the run, blamed on the fault whose window holds its second
// sighting. After every restart of a leafd the harness asks that node
// itself (its Leaf HTTP API) for ids of each tag: each must lie at or above
// the tag's max_id before the start (it has no buffer yet; a lower id is a
// range issued again, even if its first copy was never seen) — the floor
// check; the operator track checks its ids the same way after its nodes
// restart. A floor violation fails the run, as does a process that exits
// on its own after it was ready (unless a fault expects it, then it is a
// refusal), or a fault that could not be injected. Refusals — a request
// answered 400, 404, 409, 500, 501 or 503 in a fault's window, a host or
// taker that refused to start or stopped itself — are the product saying
// no rather than repeating an id: counted, not failed. The report has, per
// fault kind, the injections, requests, share answered, duplicates,
// refusals and floor violations; per kind of request and per subject the
// share answered, the longest time without a successful answer and the
// errors by code (400, 404, 503, 500, timeout, no_responders, bad_reply,
// pool_empty, pool_used); per tag the ids in each time window (the trend);
// per fault the requests in flight when it struck, the failures it
// cost and when they ended; and the availability figures below.
//
// # Availability
//
// Every request is also counted by class (bare segment, bare snowflake,
// segment, snowflake and the monotonic tag through the Go client, pool
// takes) and by the 100 ms in which it was sent: ids, ids within 1 s, an
// error answer (a wire code, no responders, an empty pool) or silence (no
// answer within the deadline); a request in flight when a fault struck
// counts apart. For each fault of the main track and each class the
// report has the share answered during the fault (strike to heal: the
// process back, the link open), after its heal, and the recovery: from
// the heal to the first moment from which 99.9% of the requests sent in
// the next 5 s (before the next fault of its lane) got ids within 1 s. Each fault kind has a
// recovery time it is held to (recoveryGoal: claim TTL + --lease-ahead
// where a worker claim can lapse, 5 s where none can); with Config.Goals
// (make soak) the run fails when a class answers under 99.9% within 1 s
// from that time on, and the schedule leaves each fault that time and
// goalSustain more before the next one.
//
// A prober asks each main leafd every second, one by one, whether it says
// it serves (/readyz, its answer to leaf.admin.status, in the snowflake
// queue group or not) and whether it does: one segment and one snowflake
// id from the node itself (its Leaf HTTP API), and, from every
// nats-server's /connz, the queue subscriptions its connections hold — a
// subscription held twice takes its share of the queue group's requests
// whether or not anything answers them. The report has, per node, the
// rounds in which it said it serves and did not, in faults and after
// them; with Goals, two such rounds in a row outside every fault fail the
// run. The ids the prober takes are checked like every other.
//
// # Lifecycle
//
// Run owns everything it starts: child processes run in process groups of
// their own and get SIGKILL if the harness dies; Run stops them all (and
// MariaDB and ZooKeeper by their scripts) before it returns, also when its
// context is cancelled or a start fails; the proxies run in the harness's
// own process and close with the cluster. Run is not meant to be called
// concurrently with itself on the same work directory; Config is copied.
//
// # Many regions
//
// RunRegions (Config.Regions 2 or 3) is a mode of its own, in regions.go:
// per region a NATS cluster named r<i> of ServersPerRegion nats-servers
// (1 or 3, routed to each other) with JetStream, joined by gateways.
// Region i's servers reach server s of region j's gateway port through
// the proxy gw-i-j-s (a latency toxic of Config.GatewayLatency each way,
// so a request and its reply across regions cost twice it), and each
// server advertises a gateway address nothing listens on, so that no
// region learns a way around a proxy. Each region has LeafdsPerRegion
// leafds (--regions N --region-id i --region r<i>, KV store, KV worker
// ids: their own buckets, --kv-replicas ServersPerRegion, placed in the
// region's cluster as the server they ask is in it) and Connections client
// connections to its servers (then to the others': a client fails over to
// another region while its own servers are down). The faults strike one
// region each, in turn: region-cut (gw-i-*-* and gw-*-i-* blackholed),
// region-partition (those proxies closed) and region-kill (the leafds,
// then the nats-servers, kill -9; restarted after RegionFor). Every
// region's ids go into one id space per tag and one for snowflake; the
// answering region of a reply is its segment id mod N or its snowflake
// id's region bits. regions_report.go judges each region: its share
// answered during a cut or partition, and in each phase of a kill
// (regionsMinAnswered), and 99.9% within 1 s from regionRecoveryGoal after
// each heal to the next fault (Goals spaces the faults to judge each).
package chaos
