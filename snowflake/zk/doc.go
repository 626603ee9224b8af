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
// Held (snowflake.HeldCounter) counts the numbers handed out so far.
//
// With Options.Region every znode of this package lives under
// /snowflake/{Name}/regions/{Region} instead of /snowflake/{Name} (Base):
// each region numbers its workers from 0 on its own, and a region never
// sees another's forever, owner or lease znodes.
//
// # Exclusiveness: the owner znode
//
// With Leaf's scheme a worker id belongs to an ip:port: Registries with
// distinct Addr values get distinct worker ids, and two processes with one
// Addr would share one. So Register also creates, for the worker it found,
//
//	/snowflake/{Name}/owner/NNNNNNNNNN   (ephemeral; NNNNNNNNNN: the worker id)
//	data: {"node":"leafd-a","host":"h1","pid":4242,"addr":"10.1.2.3:8080","started":"…","session":"0x…"}
//
// an ephemeral znode of its session that says who holds the worker id.
// While another session holds it, Register waits up to Options.OwnerWait
// (by default a session timeout plus Options.Timeout, long enough for the
// session of a killed process to expire) and then fails with ErrInUse,
// naming the holder: a second live process with the same identity never
// gets the worker id. The owner znode is named by the worker id, not the
// Addr, so that even forever znodes recreated by an operator (sequence
// numbers starting over) cannot give a live worker id to a second process.
// WaitFree does the same wait without registering, for a caller that times
// the claim from the start of Register (leafd calls it from the
// snowflake.Source's Open function). Leaf does not read
// /snowflake/{Name}/owner; a Leaf server on the same ip:port as a leafd
// node is outside this guard (and is fenced by the next point as soon as
// it writes the forever znode).
//
// # Fencing
//
// Having made the owner znode, Register writes the forever znode,
// conditional on the version it read. Every Lease is one transaction,
// conditional on the owner znode's version and on the forever znode's
// version being the one this registration wrote last (a lease that raises
// nothing still checks both). So once the session expired (the owner znode
// is gone), another process registered the worker (the version moved), or
// an operator removed or wrote either znode, Lease fails with an error
// wrapping snowflake.ErrNotRegistered and Lost is closed. Lease also fails
// that way when go-zookeeper's session is no longer the one that made the
// owner znode. A process frozen (SIGSTOP) past its session timeout thus
// wakes to failing Leases; and the process that took over waited for its
// owner znode to go and read its last lease, so it issues no id the frozen
// one may still have issued. ClaimTTL (snowflake.ClaimTTLer) is the session
// timeout the server granted: no takeover can happen sooner after a
// successful Lease.
//
// # Time leases
//
// Leaf writes its current time into the znode's "timestamp" every 3 s and
// refuses to start while its clock is behind it. Here that field holds the
// time lease: Lease(until) raises it to until (rounded up to a millisecond,
// never lowering it) before it returns, and Register returns it as
// Registration.LastLease, so the generator waits until its clock has passed
// it (Config.LastIssued). The same transaction writes the lease to
//
//	/snowflake/{Name}/lease/NNNNNNNNNN   (persistent; NNNNNNNNNN: the worker id)
//	data: {"timestamp":1700000000000,"addr":"10.1.2.3:8080"}
//
// which is keyed by the worker id and so outlives forever znodes an
// operator removes. LastLease is the highest of the forever znode's
// timestamp, the lease znode's and the cache file's lease for this worker,
// and Register writes it back to all three. A Leaf server later started at
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
// The worker id lives in a persistent znode, but the claim on it is the
// session's owner znode: on session expiry after Register, Lost is closed
// and the Registry stops: Lease and Register return
// snowflake.ErrNotRegistered. The node should stop issuing ids and open a
// new Registry, which finds the same znode again, waits for nobody (its old
// owner znode went with the session) and reads its lease. A mere
// disconnection does not close Lost (the session may still be alive), but
// Lease fails while it lasts, so the generator cannot move past its last
// lease.
//
// # Cache file
//
// With Options.CacheFile set, the worker id and the last lease are written
// to that JSON file ({"name","addr","worker","lease"}) after each
// successful Register and Lease, like Leaf's workerID.properties, and
// never lowered: Register with ZooKeeper takes the higher of the znode's
// and the file's lease (for the same Name, Addr and worker) and writes it
// to both. The file stands in for ZooKeeper only when Register cannot get a
// session, and only if it was written for the same Name and Addr.
// Registered from it, the Registry records further leases in the file
// only, with no owner znode and no fencing: with ZooKeeper unreachable
// nothing can tell whether another process holds the worker id. Once
// go-zookeeper has a session again, the next Lease moves the registration
// to ZooKeeper as Register would (owner znode, fencing write) — unless
// ZooKeeper now has another worker for this Addr, another session holds the
// owner znode, or the znode's lease is beyond this registration's: then
// the claim is lost (Lost is closed, Lease returns an error wrapping
// snowflake.ErrNotRegistered). While ZooKeeper is unreachable, cache mode
// is safe only where no other process can have this Addr (as leafd's
// default identity, the address it listens on, ensures on one host). The file holds just this node's own history: clocks must
// not have been reset meanwhile by anything the file does not record.
//
// A Registry is safe for concurrent use. Register holds the Registry's
// lock while it talks to the server, so a concurrent Close waits for it (a
// few Options.Timeout at most: Close ends a wait for another session's
// owner znode at once, and that Register fails with an error wrapping
// snowflake.ErrRegistryClosed). No goroutine of the Registry outlives Close.
package zk
