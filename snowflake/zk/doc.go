// Package zk is a snowflake.Registry on ZooKeeper that is compatible with
// Meituan Leaf-snowflake: a leafd node and a Leaf server configured with
// the same leaf.name see and respect each other's znodes.
//
// # Znodes
//
// As in Leaf's SnowflakeZookeeperHolder, every node (Options.Addr,
// "ip:port") owns one persistent sequential znode
//
//	/snowflake/{Name}/forever/{ip}:{port}-NNNNNNNNNN
//	data: {"ip":"10.1.2.3","port":"8080","timestamp":1700000000000}
//
// and its worker id is the sequence number NNNNNNNNNN. Register looks for a
// child whose name starts with "{Addr}-" and reuses it (the lowest number if
// there are several); otherwise it creates one. The znode is never deleted,
// not even by Close, so a node restarting at the same ip:port gets the same
// worker id.
//
// ZooKeeper never reuses sequence numbers: once more than MaxWorker+1
// ip:port pairs have registered under one name (or nodes were deleted and
// recreated), new nodes get numbers beyond the layout's worker field.
// Leaf then issues wrong ids (Leaf #57); Register fails with
// snowflake.ErrNoWorker and says so. Use a new Name, or clean up the
// forever znodes of retired nodes (knowing their numbers are gone for good).
//
// # Exclusiveness
//
// With Leaf's scheme a worker id belongs to an ip:port, not to a live
// session: Registries with distinct Addr values get distinct worker ids,
// but two live nodes configured with the same Addr share one. Operators own
// that, as with snowflake.Static.
//
// # Time leases
//
// Leaf writes its current time into the znode's "timestamp" every 3 s and
// refuses to start while its clock is behind it. Here that field holds the
// time lease: Lease(until) raises it to until (rounded up to a millisecond,
// never lowering it) with a versioned set before it returns, and Register
// returns it as Registration.LastLease, so the generator waits until its
// clock has passed it (Config.LastIssued). A Leaf server later started at
// the same ip:port applies its own check to the same value. This package
// does not run Leaf's 3 s reporter: the generator's leases keep the field
// current.
//
// # Sessions and Lost
//
// Open connects in the background (go-zookeeper's Connect); Register waits
// up to Options.Timeout for a session. Without one, it falls back to
// Options.CacheFile if set (see below), else fails with an error wrapping
// snowflake.ErrRegistryUnavailable; so do Register and Lease calls whose
// ZooKeeper requests fail or time out.
//
// The claim itself lives in a persistent znode and survives session loss,
// but once the session has expired this Registry no longer knows anything
// about the znode's state (another process with the same Addr, or an
// operator, may have changed or removed it), and go-zookeeper recreates
// nothing. So on session expiry after Register, Lost is closed and the
// Registry stops: Lease and Register return snowflake.ErrNotRegistered. The
// node should stop issuing ids and open a new Registry, which finds the
// same znode again and reads its lease. A mere disconnection does not close
// Lost (the session may still be alive), but Lease fails while it lasts, so
// the generator cannot move past its last lease.
//
// # Cache file
//
// With Options.CacheFile set, the worker id and the last lease are written
// to that JSON file ({"name","addr","worker","lease"}) after each
// successful Register and Lease, like Leaf's workerID.properties. It is
// read only when Register cannot get a ZooKeeper session, and used only if
// it was written for the same Name and Addr. Registered from it, the
// Registry records further leases in the file only, and Lost is never
// closed. The file holds just this node's own history: clocks must not
// have been reset meanwhile by anything the file does not record.
//
// A Registry is safe for concurrent use. Register holds the Registry's
// lock while it talks to the server, so a concurrent Close waits for it (at
// most Options.Timeout). No goroutine of the Registry outlives Close.
package zk
