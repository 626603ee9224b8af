// Package mysql is the segment.Store on MySQL or MariaDB: Meituan Leaf's
// leaf_alloc table, unchanged, so a Leaf database can be pointed at leafmq
// (and Leaf and leafmq nodes can even share it while migrating).
//
//	CREATE TABLE `leaf_alloc` (
//	  `biz_tag` varchar(128) NOT NULL DEFAULT '',
//	  `max_id` bigint(20) NOT NULL DEFAULT '1',
//	  `step` int(11) NOT NULL,
//	  `description` varchar(256) DEFAULT NULL,
//	  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
//	  PRIMARY KEY (`biz_tag`)
//	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
//
// Beside it the store keeps leafmq's own table, leaf_alloc_history
// (Options.HistoryTable): the highest max_id ever issued for every tag
// that was ever in leaf_alloc.
//
//	CREATE TABLE `leaf_alloc_history` (
//	  `biz_tag` varchar(128) NOT NULL DEFAULT '',
//	  `max_id` bigint(20) NOT NULL,
//	  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
//	  PRIMARY KEY (`biz_tag`)
//	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
//
// And leaf_alloc_mode (Options.ModeTable): each tag's mode (segment.Mode),
// inserted by Create in the transaction that inserts the row, never
// updated or deleted, so a deleted and restarted tag keeps it. A tag with
// no row there is segment. Every allocation reads it in its transaction
// (a LEFT JOIN), so the engine learns a tag's mode with its first range.
//
// And, with regions, Table + "_region" (leaf_alloc_region): one row, the
// segment.RegionMark of the region whose ids the database counts, inserted
// by the region's first node (Store.SetRegionMark) and never changed, so
// that a node of another region refuses the database
// (segment.CheckRegionMark).
//
// The same DDL is in deploy/schema.sql. Open creates the tables only when
// Options.CreateTable is set and they are missing (the first three must
// exist otherwise: ErrSchema; without the region table the database has no
// region record); it never alters an existing one. It then records
// every row of leaf_alloc that has no history yet (a Leaf database, an
// older leafmq). It checks that the table has Leaf's columns and a
// transactional engine (an allocation is an UPDATE and a SELECT in one
// transaction, as in Leaf's updateMaxIdAndGetLeafAlloc; on MyISAM two nodes
// could read each other's max_id and hand out the same range).
//
// # Allocation
//
// Advance with step 0 runs, in one transaction,
//
//	UPDATE leaf_alloc SET max_id = max_id + step
//	 WHERE biz_tag = ? AND step > 0 AND max_id <= 9223372036854775807 - step
//	SELECT max_id, step FROM leaf_alloc WHERE biz_tag = ?
//
// and returns only after COMMIT succeeded, so a range is durable before any
// of its ids is used. The row lock taken by the UPDATE serialises nodes on one
// tag; the guard keeps max_id from overflowing (segment.ErrInvalid instead).
// Advance with a step adds that step instead. SetMaxID is one guarded UPDATE that can
// only raise max_id.
//
// In the same transaction the allocation reads the tag's history record
// and raises it to the new max_id. A range that would start below the
// record — max_id lowered by hand — is refused and rolled back
// (segment.ErrBelowFloor): nothing changes, and no node gets the range.
//
// # Deleted tags
//
// A row deleted from leaf_alloc keeps its history record. Create (and so
// the engine's auto-create) refuses the tag with segment.ErrTagDeleted:
// starting it again at 1 would repeat its ids. Restart (leafctl tag
// restart TAG --floor N) locks the row and the record, refuses a floor below
// either (segment.ErrBelowFloor), and sets or inserts the row at the floor
// (a re-inserted row gets segment.DefaultStep). Deleting or lowering rows of
// leaf_alloc_history by hand gives that protection up.
//
// # Errors and time-outs
//
// Arguments are checked before any I/O (segment.ErrInvalid). Every call is
// bounded by Options.Timeout (default 3s) on top of the caller's context, and
// connections get dial, read and write time-outs unless the DSN sets its own
// (timeout, readTimeout, writeTimeout), so a dead or SIGSTOPped server fails
// with segment.ErrUnavailable instead of hanging. A call whose own context
// ends returns an error wrapping ctx.Err(); the store's internal time-out
// does not wrap context.DeadlineExceeded, so the two cannot be confused.
// Driver, network and server errors wrap segment.ErrUnavailable and the cause;
// a duplicate key (1062) is segment.ErrTagExists; data errors (a description
// the column's charset cannot hold, say) are segment.ErrInvalid.
//
// # DSN
//
// The DSN is go-sql-driver syntax and must name a database:
// user:password@tcp(host:3306)/leaf. The store sets clientFoundRows (to tell
// "no such tag" from "unchanged") and interpolateParams (one round trip per
// statement) on its own connections; it does not need parseTime.
//
// # Tag names
//
// biz_tag's default collation is case-insensitive, as in Leaf: "Order" and
// "order" name the same row (so they share one counter and never overlap),
// and Create of one fails with ErrTagExists when the other exists.
//
// A Store is safe for concurrent use, and any number of Stores (processes,
// nodes) may share one table.
package mysql
