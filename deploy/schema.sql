-- leafmq segment store: Meituan Leaf's leaf_alloc table, unchanged.
--
-- An existing Leaf database works as it is: leafmq reads and advances the same
-- rows and never alters the table. `leafd` creates this table itself when it
-- is missing (segment/mysql Options.CreateTable); run this file instead where
-- the service account may not create tables:
--
--   mariadb -h db -u root -p leaf < deploy/schema.sql
--
-- DEFAULT CHARSET=utf8mb4 is the only addition to Leaf's DDL (its README
-- leaves the database default, often latin1), so that descriptions can hold any
-- text. biz_tag keeps the default, case-insensitive collation, as in Leaf.
-- ENGINE=InnoDB is required: an allocation is an UPDATE and a SELECT in one
-- transaction, and leafmq refuses a table on an engine without transactions.

CREATE TABLE IF NOT EXISTS `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per business tag. Ids of a tag start at max_id; each allocation
-- reserves `step` of them (leafmq's dynamic step may take more in one go).
-- Tags are 1-128 characters of [A-Za-z0-9_-] (they become NATS subject tokens).
--
-- INSERT INTO leaf_alloc (biz_tag, max_id, step, description)
--   VALUES ('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id');
