// Package client is the Go client of leafmq: it takes unique ids from leafd
// nodes over NATS request-reply (see package wire for the protocol).
//
//	nc, err := nats.Connect(nats.DefaultURL)
//	if err != nil { … }
//	defer nc.Close()
//	c, err := client.New(nc) // options: client.WithoutPrefetch(), client.WithBatch(min, max), …
//	if err != nil { … }
//	defer c.Close() // before nc.Close
//
//	id, err := c.Next(ctx, "orders")         // Leaf-segment id of tag "orders" (leaf.segment.orders)
//	ids, err := c.NextN(ctx, "orders", 100)  // 100 of them
//	sf, err := c.Snowflake(ctx)              // a snowflake id (leaf.snowflake)
//	sfs, err := c.SnowflakeN(ctx, 100)
//	d := c.Decode(sf)                        // d.Time, d.Worker, d.Sequence: local, no request
//	v, err := c.Mono(ctx, "versions")        // a monotonic tag (leaf.mono.versions): never cached
//
// An opaque tag is asked as any segment tag (Next, NextN); its ids are
// permuted by the nodes. A monotonic tag's ids are never prefetched: an id
// held in a cache could be older than one another client already got, and
// the tag promises that a call begun after another's reply gets a larger
// id. Its calls ask again while the tag has no leader (a switch-over).
// All requests ask for binary replies. Every method is safe for concurrent
// use; one Client per process is the intended use.
//
// # Errors
//
// Error replies map back to sentinels, which are wire's own values, so
// errors.Is works with either package's name:
//
//   - ErrBadRequest: a bad tag (not [A-Za-z0-9_-]{1,128}, checked locally
//     before any request) or count (checked locally, or 400 from the server).
//   - ErrUnknownTag: 404; the servers do not create tags on first use
//     (leafd --auto-create=false).
//   - ErrUnavailable: no ids in time. Timeouts, no responders and 503 are
//     retried with backoff (WithBackoff) until the context ends (or, for a
//     context without deadline, WithMaxWait); the error then also wraps the
//     context's error and the last attempt's (errors.Is(err,
//     context.DeadlineExceeded), errors.Is(err, nats.ErrNoResponders)).
//     Failover between nodes is NATS': each retry goes to the queue group
//     again, and a node that comes up meanwhile answers it.
//   - ErrInternal: 500.
//   - ErrClosed: the Client was closed.
//
// # Prefetch
//
// By default the client keeps a local cache of ids per tag, as Didi's tinyid
// client does, and one of snowflake ids. A call takes a cached id without a
// lock, a channel operation or an allocation: the tag's cache is found
// through an atomic pointer (the busiest tag's) or a copy-on-write map, and
// an id is taken by one atomic add on the index of the current batch. Batches
// are the replies of refills, which run in the background:
//
//   - A refill check runs when half of a batch is taken, when a batch is
//     used up and when a refill arrives. It never waits: it starts refill
//     goroutines and returns, so a caller waits only when the cache is empty.
//   - The refill size follows the rate ids are taken at: rate × WithHold
//     (default 100ms of consumption), within WithBatch (default 64 to 10000,
//     the servers' default max batch). The cache keeps at least two refills'
//     worth cached or asked for, up to rate × hold when a batch is capped, so
//     when one max batch per round trip is not enough, several refills are in
//     flight at once (at most WithPipeline, default 8).
//   - A refill that fails with a timeout, no responders or 503 is retried
//     with backoff while a caller waits for it (a prefetch nobody waits for
//     gives up after a few attempts; the next check starts another).
//
// Cached snowflake ids age: a batch is dropped once WithSnowflakeMaxAge
// (default 1s) has passed since it was asked for. (A leafd serves snowflake
// ids from a pre-filled ring, so an id's own time may be older still.)
// WithSnowflakeKey asks leaf.snowflake.KEY instead of leaf.snowflake, as a
// Leaf client names a key; leafd accepts it and serves the same ids.
//
// Ids are unique across all clients and processes: each id the servers hand
// out goes to one batch, and each index of a batch to one caller. Cached ids
// that are dropped (Close, a crash, an evicted or idle tag, an expired
// snowflake batch) are lost, a gap; they are never handed out again.
//
// The cache does not grow with the number of tags: at most WithMaxTags
// (default 1024) tags have one, the least recently used one is dropped to
// make room (about LRU: CLOCK with a second chance, and a tag used once goes
// before one used twice), and a tag unused for WithIdleTimeout (default 10m)
// is dropped.
//
// WithoutPrefetch turns the cache off: every call is a request (NextN beyond
// the max batch is split into several), retried as above.
//
// # JetStream batch pool
//
// WithPool(wait) makes refills take ready-made batches from the JetStream
// batch pool (leafd --pool TAGS,snowflake, package pool) first, and ask
// leafd only when that pool is empty; when asking leafd fails (no
// responders, timeouts) a refill waits up to wait for a pool batch before it
// retries. So a client keeps getting ids while every leafd is down, until the
// pool drains. Each pool batch is used at most once, by one client. A
// JetStream that does not answer (a stream leader election after a server
// died takes seconds) holds a refill up for at most half a second before it
// asks leafd.
//
// In a deployment of regions each region has a pool of its own, filled by
// its nodes and placed in its NATS cluster: WithPoolRegion(name) names the
// client's region, whose pool it then reads (docs/regions.md).
//
// # Goroutines
//
// A Client with prefetch runs one janitor goroutine and one goroutine per
// refill in flight. Close cancels and waits for all of them, drops every
// cached id and makes later calls return ErrClosed; it is idempotent and
// does not close the NATS connection, which the caller owns.
package client
