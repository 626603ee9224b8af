// Package chaos is leafmq's soak harness: it runs a real cluster — three
// nats-server processes with JetStream, MariaDB and ZooKeeper (started by
// scripts/mariadb.sh and scripts/zookeeper.sh), three leafd processes —
// puts a bounded request load on it, injects faults on a schedule, and
// checks every id it was given.
//
// # The cluster
//
// All on 127.0.0.1, in a fresh work directory. Every leafd gets the three
// NATS URLs, keeps segments in MariaDB (Leaf's leaf_alloc, the tags created
// up front), keeps the pool of the first tag and of snowflake full, and
// uses JetStream with three replicas. Two take snowflake worker ids from
// ZooKeeper (each with its own --zk-addr), one from JetStream KV leases.
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
// One at a time, spread evenly from a warm-up to a cool-down, cycling
// through Config.Faults (each at least once): kill -9 of a random leafd and
// its restart with the same flags; MariaDB SIGSTOPped for DBPause; a random
// nats-server killed with -9 and restarted a few seconds later;
// ZooKeeper killed with -9 and started again on the same port and data; and
// a leafd restarted with --fault-clock-step -1s@5s or -10s@5s, held until
// its clock has caught up, then restarted on the real clock.
//
// # The checks
//
// Every id answered goes into the id space of its tag (or snowflake) as
// runs of consecutive ids (16 bytes a run: a batch is one run, a single id
// one at worst), sorted at the end: any id covered twice is a duplicate and
// fails the run, as does a process that exits on its own after it was ready
// or a fault that could not be injected. The report also has, per kind of
// request and per subject, the share answered, the longest time without a
// successful answer and the errors by code (400, 404, 503, 500, timeout,
// no_responders, bad_reply, pool_empty, pool_used), per tag the ids in each
// time window (the trend), and per fault the requests in flight when it
// struck, the failures it cost and when they ended, and for the MariaDB
// pause the share of segment requests answered from buffers.
//
// # Lifecycle
//
// Run owns everything it starts: child processes run in process groups of
// their own and get SIGKILL if the harness dies; Run stops them all (and
// MariaDB and ZooKeeper by their scripts) before it returns, also when its
// context is cancelled or a start fails. Run is not meant to be called
// concurrently with itself on the same work directory; Config is copied.
package chaos
