// Package dbworker is a snowflake.Registry on Baidu UidGenerator's
// WORKER_NODE table: DisposableWorkerIdAssigner, so a leafd node and a
// UidGenerator service can share one table.
//
// # Rows
//
// Register inserts one row, as UidGenerator's WorkerNodeDAO.addWorkerNode
// does, and the row's AUTO_INCREMENT ID is the worker id:
//
//	INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED)
//	VALUES (Options.Host, Options.Port, Options.Type, CURDATE(), NOW(), NOW())
//
// The id is disposable: every Registry (every start of a node) gets a new
// one, and no id is ever handed out twice while the table keeps its
// AUTO_INCREMENT counter. Calling Register again on the same Registry
// returns the same worker id without inserting another row. Without a
// region WORKER_NODE is never altered, updated or read beyond that insert;
// Options.CreateTable creates it with UidGenerator's DDL (also in
// deploy/schema.sql) if it is missing.
//
// # Regions
//
// With Options.Region each region hands out worker ids of its own, 0 up
// to the layout's MaxWorker within the region: Register takes the
// region's next one from LEAF_WORKER_REGION (REGION, LAST_WORKER; a
// locked upsert, in one transaction with the WORKER_NODE insert) and
// stores the region in WORKER_NODE's REGION column, which Open adds to an
// existing table (its earlier rows are region ""; UidGenerator's inserts
// name their columns and are not affected). Leases are keyed by (REGION,
// WORKER_ID), so a region never sees another's.
//
// # Running out of ids
//
// UidGenerator's layout has 22 worker bits: about 4 million starts before
// the ids run out. Leaf's layout has 10: only 1024 starts, counted over the
// table's whole life, including UidGenerator's own rows. Once ID exceeds
// the layout's MaxWorker, Register fails with snowflake.ErrNoWorker and
// says so (the inserted row stays, as UidGenerator leaves its rows). Use a
// registry that reuses ids (snowflake/zk, snowflake/kvworker) for Leaf's
// layout, or reset the counter knowing what that means (below). Held
// (snowflake.HeldCounter) says how far the counter has come: every id up
// to the last one handed out.
//
// # Time leases
//
// UidGenerator keeps no time on WORKER_NODE, and this package does not add
// any: leases live in a leafmq-owned side table in the same database,
// created by Open if missing,
//
//	LEAF_WORKER_LEASE (REGION VARCHAR(64) NOT NULL DEFAULT '', WORKER_ID BIGINT,
//	                   LEASE_MS BIGINT NOT NULL, OWNER VARCHAR(64) NOT NULL DEFAULT '',
//	                   PRIMARY KEY (REGION, WORKER_ID))
//
// (Open adds OWNER and REGION to a table made by an older leafmq; without
// regions REGION is "".) Register makes its
// registration the id's OWNER (a random token) with
// INSERT … ON DUPLICATE KEY UPDATE OWNER, then reads the row's LEASE_MS as
// Registration.LastLease. Normally there is none (the id is new), so
// LastLease is zero; but if WORKER_NODE was truncated or its AUTO_INCREMENT
// lowered, ids come round again, and the side table makes the generator
// wait for the previous holder's lease.
//
// Lease(until) stores until (unix ms, rounded up) with
// UPDATE … SET LEASE_MS = GREATEST(LEASE_MS, ?) WHERE WORKER_ID = ? AND OWNER = ?
// before it returns, so a lease is durable and never moves backwards.
//
// # Fencing and Lost
//
// A disposable id belongs to its row, and no other node is given it unless
// an operator resets the counter. If one does while the old holder still
// runs (or is frozen), the new holder's Register takes OWNER, and from then
// on the old holder's Lease matches no row (the connection reports found
// rows, so an UPDATE that changes nothing still counts): it closes Lost and
// fails with an error wrapping snowflake.ErrNotRegistered. Every lease the
// old holder had confirmed was committed before the new OWNER, so it is in
// the new holder's LastLease, and the new holder's ids come after the old
// one's. A Lease of a lower until still runs the fenced UPDATE, as a
// confirmation. Lost is closed only then. A Lease that fails otherwise (the
// database is unreachable) returns an error, so the generator cannot move
// past its last stored lease; and the Registry implements
// snowflake.ClaimTTLer with Options.ClaimTTL (default 10s), so a Source
// stops serving once that long has passed since its last confirmed Lease.
//
// # Errors
//
// A database that cannot be reached, or does not answer within
// Options.Timeout, gives an error wrapping snowflake.ErrRegistryUnavailable;
// bad options or DSN ErrInvalid; a missing WORKER_NODE (without
// CreateTable) ErrSchema. After Close, Register and Lease return
// snowflake.ErrRegistryClosed.
//
// A Registry is safe for concurrent use. Register and Lease hold the
// Registry's lock while they talk to the database, so a concurrent Close
// waits for them (at most Options.Timeout). The Registry starts no
// goroutines.
package dbworker
